import subprocess
def test_smoke(ssh_config_env):
    from execsys.ssh import run_python, run_remote
    r = run_python(ssh_config_env.dest, "print(PAYLOAD['a'])", {"a": 41}, timeout=20)
    assert r.ok, r.describe()
    assert r.text().strip() == "41"
    r = run_remote(ssh_config_env.unreachable_dest, ["true"], timeout=20)
    assert r.returncode == 255, r.describe()
    print(r.text("stderr"))
