"""Drives the web console in a real headless Chromium (Playwright, the system's chromium).

Run by tests/console_browser.rs, which starts the real server (development mode: the built-in
demo agent) behind a TCP fault proxy. Environment: CONSOLE_URL (through the proxy), BEARER
(a token), SCREENSHOTS (a directory), CHROMIUM (the browser executable).

The harness and this script talk over stdin/stdout lines: this script prints `CMD <name>` and
waits for `OK` (the harness cuts or restores the proxy, or answers an approval itself).
Every failed check raises, so the process exits non-zero with the reason on stderr.
"""

import json
import os
import re
import sys

from playwright.sync_api import expect, sync_playwright

URL = os.environ["CONSOLE_URL"]
BEARER = os.environ["BEARER"]
SHOTS = os.environ["SCREENSHOTS"]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
TIMEOUT = 30_000


def command(name, *args):
    print("CMD", name, *args, flush=True)
    answer = sys.stdin.readline().strip()
    if answer != "OK":
        raise RuntimeError(f"harness answered {answer!r} to {name}")


def shot(page, name):
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=False)


def check_no_duplicates(page, session_id):
    """Every stored event shows once, in order; standalone events are each one element."""
    events = page.evaluate(
        """async (id) => {
            const token = sessionStorage.getItem("norma.console.token");
            const r = await fetch(`/v1/sessions/${id}/events?limit=1000`,
                                  {headers: {Authorization: `Bearer ${token}`}});
            return (await r.json()).events;
        }""",
        session_id,
    )
    seqs = page.eval_on_selector_all(
        "[data-seq]", "nodes => nodes.map(n => Number(n.getAttribute('data-seq')))"
    )
    if len(seqs) != len(set(seqs)):
        raise AssertionError(f"an event is shown twice: {sorted(seqs)}")
    shown = set(seqs)
    for event in events:
        if event["type"] in ("run_started", "tool_call", "terminal", "usage", "tool_result",
                             "permission_decision", "approval_requested", "approval_decided"):
            if event["seq"] not in shown:
                raise AssertionError(f"event {event['seq']} {event['type']} is missing")
    return events


def main():
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.set_default_timeout(TIMEOUT)
        console_errors = []
        # Network failures (the refused token, the cut stream) are logged by the browser
        # itself; anything else (a script error, a CSP violation) fails the test.
        page.on(
            "console",
            lambda m: m.type == "error"
            and "Failed to load resource" not in m.text
            and "net::ERR" not in m.text
            and console_errors.append(m.text),
        )
        page.on("pageerror", lambda e: console_errors.append(str(e)))

        page.goto(URL)
        expect(page.locator("#sign-in-view")).to_be_visible()
        # A wrong token is refused with the server's code.
        page.fill("#token-input", "not-a-token")
        page.press("#token-input", "Enter")
        expect(page.locator("#sign-in-error")).to_contain_text("UNAUTHENTICATED")
        shot(page, "01-sign-in")
        page.fill("#token-input", BEARER)
        page.click("#sign-in-form button[type=submit]")
        expect(page.locator("#app-view")).to_be_visible()
        if BEARER in page.url:
            raise AssertionError("the token is in the URL")

        # Create a session from the form.
        page.click("#new-session")
        page.fill("#create-title", "Browser demo")
        page.click("#create-form button[type=submit]")
        expect(page.locator("#session-title")).to_have_text("Browser demo")
        session_id = page.locator("#session-id").inner_text()
        expect(page.locator(f"#session-list li[data-session-id='{session_id}']")).to_be_visible()
        expect(page.locator("#conn")).to_have_attribute("data-state", "live")
        expect(page.locator("#sandbox li").first).to_be_visible()

        # 1. Prompt (Enter submits); watch the text stream; approve the write in the browser.
        page.fill("#prompt-input", "hello from the browser")
        page.press("#prompt-input", "Enter")
        first = page.locator("li.event.assistant").first
        expect(first).to_contain_text("built-in demo agent")
        if first.get_attribute("data-last-seq") is None:
            raise AssertionError("the first answer did not stream in several deltas")
        expect(page.locator("li.event.tool").first).to_contain_text("LS")
        approval = page.locator("#approvals .approval").first
        expect(approval).to_contain_text("Write")
        # Waiting in process, or parked after `approval_park_after_ms`.
        expect(page.locator("#run-status")).to_have_text(re.compile("waiting|parked"))
        shot(page, "02-approval")
        approval.locator("[data-role=grant-scope]").select_option("")
        approval.locator("[data-role=allow]").click()
        expect(page.locator("li.event.terminal")).to_have_count(1)
        expect(page.locator("li.event.terminal").first).to_contain_text("completed")
        expect(page.locator("#transcript")).to_contain_text("You said: hello from the browser")
        expect(page.locator("#approvals .approval")).to_have_count(0)
        expect(page.locator("#runs li .badge.completed")).to_have_count(1)
        shot(page, "03-run-finished")

        # 2. Kill the SSE connection while the run waits; the approval is answered elsewhere
        #    during the outage; the console reconnects with Last-Event-ID and catches up.
        page.fill("#prompt-input", "second prompt")
        page.press("#prompt-input", "Control+Enter")
        expect(page.locator("#approvals .approval")).to_have_count(1)
        command("cut-and-hold")
        expect(page.locator("#conn")).to_have_attribute("data-state", "reconnecting")
        command("approve-pending", session_id)
        command("restore")
        expect(page.locator("#conn")).to_have_attribute("data-state", "live", timeout=TIMEOUT)
        notice = page.locator("[data-role=reconnect-notice]")
        expect(notice).to_have_count(1)
        expect(notice).to_contain_text("resumed after event")
        expect(page.locator("li.event.terminal")).to_have_count(2)
        expect(page.locator("#transcript")).to_contain_text("You said: second prompt")
        check_no_duplicates(page, session_id)
        # Each turn's text shows once: the final message replaces the streamed bubble.
        expect(page.locator("li.event.assistant", has_text="The workspace holds")).to_have_count(2)
        expect(page.locator("li.event.assistant", has_text="built-in demo agent")).to_have_count(2)
        shot(page, "04-reconnected")

        # 3. Deny with a reason in the browser.
        page.fill("#prompt-input", "third prompt")
        page.press("#prompt-input", "Enter")
        approval = page.locator("#approvals .approval").first
        expect(approval).to_contain_text("Write")
        approval.locator("[data-role=reason]").fill("not in this demo")
        approval.locator("[data-role=deny]").click()
        expect(page.locator("li.event.terminal")).to_have_count(3)
        expect(page.locator("#transcript")).to_contain_text("I did not write the file")
        expect(page.locator("#transcript")).to_contain_text("not in this demo")
        expect(page.locator("li.event.tool").last).to_contain_text("denied")
        check_no_duplicates(page, session_id)
        shot(page, "05-denied")

        # Narrow screen: the layout stacks and stays usable.
        page.set_viewport_size({"width": 420, "height": 900})
        expect(page.locator("#prompt-input")).to_be_visible()
        shot(page, "06-narrow")

        # The token stayed out of every URL; the page produced no script errors (CSP included).
        if console_errors:
            raise AssertionError(f"console errors: {json.dumps(console_errors)}")
        browser.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
