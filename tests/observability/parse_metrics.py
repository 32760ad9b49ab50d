"""Parses an OpenMetrics exposition (stdin) with the Prometheus client library's strict
OpenMetrics parser and prints its samples as JSON lines: {"family", "type", "name",
"labels", "value"}. Exits non-zero (with the parser's message) on invalid text.
Used by tests/observability.rs."""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main() -> None:
    text = sys.stdin.read()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            print(
                json.dumps(
                    {
                        "family": family.name,
                        "type": family.type,
                        "name": sample.name,
                        "labels": sample.labels,
                        "value": sample.value,
                    }
                )
            )


if __name__ == "__main__":
    main()
