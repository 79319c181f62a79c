"""``browse --prebuild``'s indexing progress: bars on a terminal, one line per indexed invocation elsewhere."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios

from mirrorscan.jobs.browse import _progress


def test_indexing_in_a_pipe_prints_one_line_per_invocation_and_no_bar(capsys, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    report = _progress()   # pytest's captured stderr is no terminal
    for done in range(4):
        report("0123456789abcdef", done, 3)
    report("fedcba9876543210", 1, 1)
    assert capsys.readouterr().err == "indexed 01234567 (3 parts)\nindexed fedcba98 (1 part)\n"


def test_on_a_real_terminal_indexing_draws_a_bar_unless_ci_is_set(monkeypatch):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    try:
        with open(slave, "w", closefd=False) as terminal:
            monkeypatch.setattr(sys, "stderr", terminal)
            shown = {}
            for ci in ("true", None):
                if ci is None:
                    monkeypatch.delenv("CI", raising=False)
                else:
                    monkeypatch.setenv("CI", ci)
                report = _progress()
                report("0123456789abcdef", 2, 2)
                terminal.flush()
                chunks = []   # every write so far: one read may return only the first
                while select.select([master], [], [], 0.5)[0]:
                    chunks.append(os.read(master, 65536))
                shown[ci] = b"".join(chunks).decode(errors="replace")
        assert shown["true"] == "indexed 01234567 (2 parts)\r\n", shown   # CI: the line, no bar
        assert "indexing 01234567" in shown[None] and "2/2" in shown[None], shown   # the same terminal: a bar
    finally:
        os.close(master)
        os.close(slave)
