"""Benchmark: where the verdict and the per-layer table of report.html end, in a real browser.

Usage: python benchmarks/report_layout.py REPORT.html [--width 1280] [--height 900]
       [--browser /usr/bin/chromium] [--screenshot OUT.png]

Opens a copy of the page in headless Chromium at the given window size, with one script added
that measures the bottom edge (CSS pixels from the top of the page) of the verdict box, the
contents line and the per-layer table, and prints them beside the window's height: the target is
the table's bottom within the first screen (900 px at 1280 px wide). With --screenshot, the first
screen as a PNG. Chromium is Debian's package `chromium` (not a dependency of the project).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = """<script>
window.addEventListener("load", () => {
  const out = {};
  for (const [name, sel] of [["verdict", "#verdict"], ["contents", "#contents"],
                             ["table", "#layers table"], ["layers", "#layers"]]) {
    const el = document.querySelector(sel);
    out[name] = el ? Math.round(el.getBoundingClientRect().bottom + window.scrollY) : null;
  }
  out.width = document.documentElement.scrollWidth;
  const pre = document.createElement("pre");
  pre.id = "layout-measure";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium(browser: str, width: int, height: int, *extra: str) -> list[str]:
    return [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        "--virtual-time-budget=3000",
        *extra,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--browser", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--screenshot", type=Path, default=None)
    args = parser.parse_args()
    if not Path(args.browser).exists():
        sys.exit(f"no browser at {args.browser}: install Debian's chromium, or pass --browser")
    page = args.report.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>", 1)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(page, encoding="utf-8")
        profile = f"--user-data-dir={Path(tmp) / 'profile'}"
        run = chromium(args.browser, args.width, args.height, profile, "--dump-dom", copy.as_uri())
        dom = subprocess.run(run, capture_output=True, text=True, timeout=120).stdout
        found = re.search(r'<pre id="layout-measure">(.*?)</pre>', dom)
        if found is None:
            sys.exit("the browser gave no measurement")
        where = json.loads(found.group(1).replace("&quot;", '"'))
        if args.screenshot is not None:
            shot = f"--screenshot={args.screenshot.resolve()}"
            subprocess.run(
                chromium(args.browser, args.width, args.height, profile, shot, copy.as_uri()),
                capture_output=True,
                timeout=120,
            )
    fits = where["table"] is not None and where["table"] <= args.height
    print(
        f"{args.report}: at {args.width} px wide, the verdict ends at {where['verdict']} px, the "
        f"contents at {where['contents']} px, the per-layer table at {where['table']} px "
        f"({'within' if fits else 'below'} the first {args.height} px); page width "
        f"{where['width']} px"
    )


if __name__ == "__main__":
    main()
