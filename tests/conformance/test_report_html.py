"""What a person sees first when opening report.html: headless Chromium (Debian's
`chromium`, which .ci/run installs) lays out the planted run's report in a laptop
window, and the verdict, the first blocker and its bisection command must be on
the first screen, above any SHOULD finding, whose tests stay folded."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import load_report
from test_report_order import BLOCKER, planted_run

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
# Flags for a closed network: nothing reaches out, no profile outside user-data-dir.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
WINDOW = (1280, 800)

# Measures the page as laid out and writes the result into the DOM, which
# --dump-dom prints. Only the test's copy of the report carries it.
PROBE = """<script>
(() => {
  const box = (el) => {
    if (!el) return null;
    const r = el.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, width: r.width, height: r.height,
            // false inside a closed <details> (content-visibility: hidden), as display: none
            shown: el.checkVisibility({visibilityProperty: true}) && r.width > 0 && r.height > 0,
            text: el.textContent};
  };
  const q = (s) => document.querySelector(s);
  const out = {
    fold: window.innerHeight,
    verdict: box(q('#verdict')),
    blocker: box(q('.blocker')),
    blockerTest: box(q('.blocker .blocker-test')),
    bisect: box(q('.blocker .bisect')),
    findings: box(q('#should-findings')),
    shouldRows: [...document.querySelectorAll('tr.should-test')].map(box),
  };
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory, flemu_library: str) -> tuple[Path, str]:
    return planted_run(tmp_path_factory)


def _layout(html: Path, tmp: Path) -> dict[str, Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: this test renders the report in headless Chromium; "
                    "install Debian's chromium package (apt-get install -y chromium), as "
                    ".ci/run does")
    probe = tmp / "probe.html"
    probe.write_text(html.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"),
                     encoding="utf-8")
    profile, home = tmp / "profile", tmp / "home"
    profile.mkdir()
    home.mkdir()
    # Chromium's own files (crash reports, dconf, nss) go under the temporary home.
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache")}
    r = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}",
                        f"--window-size={WINDOW[0]},{WINDOW[1]}", "--dump-dom",
                        probe.as_uri()],
                       check=False, capture_output=True, text=True, timeout=120, env=env)
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.DOTALL)
    assert m, f"chromium exited {r.returncode} without the probe; stderr: {r.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<")
                      .replace("&gt;", ">").replace("&amp;", "&"))


def test_first_screen_shows_verdict_blocker_and_its_bisection(planted: tuple[Path, str],
                                                              tmp_path: Path) -> None:
    out, _ = planted
    report = load_report(out)
    first = report["blockers"]["items"][0]
    assert first["test"] == BLOCKER, first
    seen = _layout(out / "report.html", tmp_path)
    fold = seen["fold"]
    assert fold > 500, seen  # a laptop window, not a strip
    verdict, blocker, test_id, bisect = (seen[k] for k in
                                         ("verdict", "blocker", "blockerTest", "bisect"))
    assert verdict and verdict["shown"] and verdict["bottom"] <= fold, (verdict, fold)
    assert f"Level: {report['level']['achieved']}" in verdict["text"], verdict
    assert blocker and blocker["shown"] and blocker["bottom"] <= fold, (blocker, fold)
    assert test_id["text"] == BLOCKER, test_id
    assert bisect and bisect["shown"] and bisect["width"] > 0 and bisect["bottom"] <= fold, \
        (bisect, fold)
    assert bisect["text"] == first["bisect"], bisect["text"]
    assert "TORCH_FL_DISABLE_KERNELS=aten::add.Tensor" in bisect["text"], bisect["text"]
    findings = seen["findings"]
    assert findings and findings["top"] >= blocker["bottom"], (findings, blocker)
    rows = seen["shouldRows"]
    assert len(rows) == sum(len(f["tests"]) for f in report["should_findings"]) > 10, len(rows)
    assert not any(r["shown"] for r in rows), "SHOULD tests must stay folded in <details>"
