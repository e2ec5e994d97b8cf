"""Which line of a failed rank's output ``describe``'s Failed Attempts shows (``LAST LINE``): the one that says
what failed, not torchrun's framed report or a rule of ``=``."""

from __future__ import annotations

import pytest

from kubedl_py.cli.output import telling_line

TORCHRUN_REPORT = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/app/train.py", line 40, in <module>
[rank1]:     loss.backward()
[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered
E1203 11:00:00.000000 1 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) local_rank: 1
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_11:00:00
  host      : node-7
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 42)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


@pytest.mark.parametrize(
    ("message", "told"),
    [
        (TORCHRUN_REPORT, "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered"),
        ("step 1\nTraceback (most recent call last):\nValueError: boom\n", "ValueError: boom"),
        ("loading\nsegfault in worker\n=====\n", "segfault in worker"),
        ("", ""),
    ],
)
def test_the_line_that_says_what_failed(message: str, told: str) -> None:
    assert telling_line(message) == told


def test_without_the_ranks_lines_torchruns_failure_line_is_shown() -> None:
    # the rank's lines cut away (only the last 2 KiB are kept): no rank exception is left, so the line before
    # torchrun's report (its ChildFailedError) says it, not the report's last "traceback :" line
    report = TORCHRUN_REPORT[TORCHRUN_REPORT.index("E1203") :]
    told = telling_line(report)
    assert told == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", told


def test_only_torchruns_report_left_says_which_script_failed() -> None:
    report = TORCHRUN_REPORT[TORCHRUN_REPORT.index("=====") :]
    assert telling_line(report) == "train.py FAILED"
