pytest_plugins = [
    "tests.fixtures.common",
    "tests.fixtures.sshd",
    "tests.fixtures.llama",
    "tests.fixtures.slurm",
]
