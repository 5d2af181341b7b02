"""The official postgres image's entrypoint, for Debian's PostgreSQL: what `./dev stack`
runs for a service whose image is `postgres`.

    python -m devstack.postgres_entry BIN_DIR [postgres options...]

Started as root on the service's host with PGDATA and PGHOST (the socket folder) set. On
an empty data folder it does what docker-entrypoint.sh does: initdb with POSTGRES_USER as
the superuser and POSTGRES_PASSWORD as its password (scram-sha-256 over TCP), creates
POSTGRES_DB, and runs /docker-entrypoint-initdb.d/*.sql (their local folder is given as
BATCHPOINT_INITDB_DIR) on a server that listens on the socket only. Then it becomes the
`postgres` user and execs the server on every address.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

USER = "postgres"


def _as_postgres(args: list[str], env: dict[str, str]) -> None:
    subprocess.run(args, check=True, env=env, user=USER, group=USER, extra_groups=[])


def _own(path: Path, account: pwd.struct_passwd) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, account.pw_uid, account.pw_gid)


def initialise(bin_dir: Path, data: Path, sockets: Path, env: dict[str, str]) -> None:
    user = env.get("POSTGRES_USER", USER)
    password = env.get("POSTGRES_PASSWORD")
    if not password:
        raise SystemExit("POSTGRES_PASSWORD is required (as the postgres image requires it)")
    database = env.get("POSTGRES_DB", user)
    with tempfile.NamedTemporaryFile("w", dir=sockets, delete=False) as pwfile:
        pwfile.write(password + "\n")
    account = pwd.getpwnam(USER)
    os.chown(pwfile.name, account.pw_uid, account.pw_gid)
    try:
        _as_postgres(
            [
                str(bin_dir / "initdb"),
                f"--pgdata={data}",
                f"--username={user}",
                f"--pwfile={pwfile.name}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
            ],
            env,
        )
    finally:
        os.unlink(pwfile.name)
    with (data / "pg_hba.conf").open("a") as hba:
        hba.write("host all all all scram-sha-256\n")
    server = ["-c", "listen_addresses=", "-c", f"unix_socket_directories={sockets}"]
    pg_ctl = str(bin_dir / "pg_ctl")
    _as_postgres([pg_ctl, "-D", str(data), "-o", " ".join(server), "-w", "start"], env)
    try:
        psql = [str(bin_dir / "psql"), "-v", "ON_ERROR_STOP=1", "-h", str(sockets), "-U", user]
        if database != "postgres":
            _as_postgres([*psql, "-d", "postgres", "-c", f'CREATE DATABASE "{database}"'], env)
        scripts = Path(env.get("BATCHPOINT_INITDB_DIR", "/nonexistent"))
        for script in sorted(scripts.glob("*.sql")) if scripts.is_dir() else []:
            print(f"postgres_entry: running {script.name}", flush=True)
            _as_postgres([*psql, "-d", database, "-f", str(script)], env)
    finally:
        _as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], env)


def main(argv: list[str]) -> int:
    bin_dir, options = Path(argv[0]), argv[1:]
    env = dict(os.environ)
    data, sockets = Path(env["PGDATA"]), Path(env["PGHOST"])
    account = pwd.getpwnam(USER)
    _own(data, account)
    _own(sockets, account)
    if not (data / "PG_VERSION").exists():
        initialise(bin_dir, data, sockets, env)
    server = [
        str(bin_dir / "postgres"),
        "-D",
        str(data),
        "-c",
        "listen_addresses=*",
        "-c",
        f"unix_socket_directories={sockets}",
        *options,
    ]
    os.initgroups(USER, account.pw_gid)
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)
    os.execv(server[0], server)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
