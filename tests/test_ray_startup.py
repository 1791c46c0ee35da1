"""A Ray worker that cannot start is one line naming its cause, read from this session's
raylet.err (``polytrace.bench.cluster.startup_cause``). The text below is what Ray 2.60 wrote when
every worker's interpreter lay in a folder named "new user" (the runtime_env path runs it through
``bash -c`` unquoted); no Ray is needed to read it."""

from __future__ import annotations

from polytrace.bench.cluster import startup_cause

RAYLET_ERR = """\
bash: line 1: /tmp/new: No such file or directory
bash: line 1: /tmp/new: No such file or directory
[2026-12-06 07:36:26,403 E 7261 7261] (raylet) worker_pool.cc:660: Some workers of the worker process(7416) \
have not registered within the timeout. The process is dead, probably it crashed during start.
*** SIGTERM received at time=1796542669 on cpu 1 ***
PC: @     0x7fca120a3f16  (unknown)  (unknown)
2026-12-06 07:35:20,620\tWARNING authentication_token_setup.py:85 -- Token authentication is enabled
"""


def test_the_shells_message_is_the_cause_not_rays_symptom():
    assert startup_cause(RAYLET_ERR) == "bash: line 1: /tmp/new: No such file or directory"


def test_a_ray_error_line_without_a_shell_message_is_named_without_its_prefix():
    text = "\n".join(RAYLET_ERR.splitlines()[2:])
    assert startup_cause(text) == ("Some workers of the worker process(7416) have not registered within the "
                                   "timeout. The process is dead, probably it crashed during start.")


def test_warnings_and_info_lines_are_no_cause():
    info = "[2026-12-06 07:36:26,403 I 7261 7261] (raylet) main.cc:12: Raylet started."
    assert startup_cause(RAYLET_ERR.splitlines()[-1] + "\n" + info + "\n") is None
    assert startup_cause("") is None
