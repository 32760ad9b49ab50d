"""Drives a real headless Chromium through a page on another origin than the server.

Usage: stream_page.py PAGE_URL

The page (served by the Rust test) lists sessions with `fetch` + bearer, asks for a stream
ticket and follows the session's stream with a plain `EventSource`. Protocol on stdio with the
Rust test:
  -> `FIRST <n>`   once the first run's `terminal` event arrived (n events seen)
  <- `GO`          after the test cut the SSE connection and started a second run
  -> `STATE <json>` once the second `terminal` arrived (or on timeout), then exit
"""

import json
import os
import sys
import time

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("NORMA_TEST_CHROMIUM", "/usr/bin/chromium")


def state(page):
    return page.evaluate("() => JSON.parse(JSON.stringify(window.state))")


def wait_for(page, predicate, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        current = state(page)
        if predicate(current):
            return current
        time.sleep(0.1)
    return state(page)


def terminals(current):
    return sum(1 for e in current["events"] if e["type"] == "terminal")


def main():
    page_url = sys.argv[1]
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        page = browser.new_page()
        console = []
        page.on("console", lambda m: console.append(m.text))
        page.goto(page_url)
        first = wait_for(page, lambda s: terminals(s) >= 1 or s["failure"], 30)
        print(f"FIRST {len(first['events'])}", flush=True)
        if sys.stdin.readline().strip() != "GO":
            sys.exit(2)
        final = wait_for(page, lambda s: terminals(s) >= 2 or s["failure"], 45)
        final["console"] = console
        print("STATE " + json.dumps(final), flush=True)
        browser.close()


if __name__ == "__main__":
    main()
