#!/usr/bin/env python3
"""Loads a page in a real headless Chromium (Debian's `chromium`) and reads it back, for the
dashboard tests. Chromium is driven through the DevTools protocol over a pipe
(--remote-debugging-pipe: JSON messages separated by NUL on file descriptors 3 and 4), so no
WebSocket library and no npm tool is needed. It runs with a fresh profile, no network beyond
the page, and is killed (by its pid) if it does not close.

  browser.py URL --until JS [--timeout S] [--eval JS] [--screenshot FILE] [--width W --height H]

Waits until the expression --until is true in the page (polling every 0.25 s, at most --timeout
seconds: exit 3 if it never is), then prints the JSON value of --eval (default: the --until
expression's value) on stdout, and saves a PNG of the full page if asked.
"""
import argparse
import base64
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars"]


class Browser:
    def __init__(self, width, height):
        self.profile = tempfile.mkdtemp(prefix="ezdash-chromium.")
        r_in, self.w_in = os.pipe()    # we write, Chromium reads fd 3
        self.r_out, w_out = os.pipe()  # Chromium writes fd 4, we read

        def child():
            os.dup2(r_in, 3)
            os.dup2(w_out, 4)

        exe = shutil.which("chromium") or "/usr/bin/chromium"
        self.err = open(os.path.join(self.profile, "stderr.log"), "w")
        self.proc = subprocess.Popen(
            [exe, *FLAGS, "--user-data-dir=" + self.profile, "--remote-debugging-pipe",
             "--window-size=%d,%d" % (width, height), "about:blank"],
            preexec_fn=child, pass_fds=(3, 4), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.err, start_new_session=True)
        os.close(r_in)
        os.close(w_out)
        self.buf = b""
        self.next_id = 0
        self.session = None

    def call(self, method, params=None, timeout=20):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.w_in, json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + timeout
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                d = json.loads(raw)
                if d.get("id") == self.next_id:
                    if "error" in d:
                        raise RuntimeError("%s: %s" % (method, d["error"]))
                    return d.get("result", {})
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(method)
            r, _, _ = select.select([self.r_out], [], [], min(left, 0.5))
            if r:
                chunk = os.read(self.r_out, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium exited (see %s)" % self.err.name)
                self.buf += chunk

    def open(self, url, width, height):
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.call("Page.enable")
        self.call("Page.navigate", {"url": url})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            return None
        return r.get("result", {}).get("value")

    def screenshot(self, path):
        m = self.call("Page.getLayoutMetrics")
        size = m.get("cssContentSize") or m.get("contentSize")
        w, h = int(size["width"]), min(int(size["height"]), 4000)
        shot = self.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}})
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def close(self):
        try:
            self.session = None
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.err.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--until", required=True)
    ap.add_argument("--eval")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--screenshot")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=1000)
    a = ap.parse_args()
    b = Browser(a.width, a.height)
    try:
        b.open(a.url, a.width, a.height)
        end = time.monotonic() + a.timeout
        while not b.eval(a.until):
            if time.monotonic() > end:
                print("browser.py: never true: %s" % a.until, file=sys.stderr)
                print(json.dumps(b.eval("document.body ? document.body.innerText : null")),
                      file=sys.stderr)
                return 3
            time.sleep(0.25)
        print(json.dumps(b.eval(a.eval or a.until)))
        if a.screenshot:
            b.screenshot(a.screenshot)
        return 0
    finally:
        b.close()


if __name__ == "__main__":
    sys.exit(main())
