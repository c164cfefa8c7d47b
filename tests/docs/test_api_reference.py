"""docs/api.md's command builds the API reference with pdoc, and every hook its table names is documented there."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from helpers import ROOT

PAGE = ROOT / "docs" / "api.md"


def test_the_documented_pdoc_command_documents_every_hook_the_page_names(tmp_path):
    text = PAGE.read_text()
    [command] = re.findall(r"^```bash\n(python -m pdoc .*?)\n```", text, re.S | re.M)
    argv = shlex.split(command)
    argv[argv.index("-o") + 1] = str(tmp_path / "api")
    out = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    modules = [a for a in argv if a.startswith("agentrl.")]
    pages = {m: (tmp_path / "api" / (m.replace(".", "/") + ".html")) for m in modules}
    assert all(p.is_file() for p in pages.values()), [m for m, p in pages.items() if not p.is_file()]
    for row in text.splitlines():
        cells = [c.strip() for c in row.split("|")[1:-1]]
        if len(cells) != 3 or not cells[1].startswith("`agentrl."):
            continue
        first = re.findall(r"`(agentrl\.[\w.]+)`", cells[1])[0]
        where = [first] + [first.rsplit(".", 1)[0] + m for m in re.findall(r"`(\.\w+)`", cells[1])]
        html = "".join(pages[m].read_text() for m in where)
        for hook in re.findall(r"`(\w+)`", cells[2]):
            assert f'id="{hook}"' in html or re.search(rf'id="\w+\.{hook}"', html), (hook, where)
