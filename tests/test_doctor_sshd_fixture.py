def test_smoke(ssh_config_env):
    from execsys.ssh import run_python, run_remote
    r = run_python(ssh_config_env.dest, "print(PAYLOAD['a'])", {"a": 41}, timeout=20)
    assert r.ok, r.describe()
    assert r.text().strip() == "41"
    r = run_remote(ssh_config_env.unreachable_dest, ["true"], timeout=20)
    assert r.returncode == 255, r.describe()
    print(r.text("stderr"))


def test_skewed_alias_runs_with_a_clock_ahead(ssh_config_env):
    import time

    import pytest

    from execsys.ssh import run_python
    if ssh_config_env.skewed_dest is None:
        pytest.skip("libfaketime not installed (apt-get install libfaketime)")
    before = time.time()
    r = run_python(ssh_config_env.skewed_dest, "import time; print(time.time())", timeout=20)
    assert r.ok, r.describe()
    assert float(r.text()) - before > 4.0
