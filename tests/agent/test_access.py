"""The real agent's access delivery, run against a temporary directory as the node's filesystem:
authorized_keys written for the tenant user (owner, 0600, .ssh 0700), volumes mounted, the image
verified, ssh-keygen and sshd asked; wipe removes keys, mounts and tenant data and says so.
`ssh-keygen` runs for real when it is installed; mount, umount and sshd are recorded."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from hangar_agent.access import MANIFEST, TENANT_DATA_DIR, parse_spec, with_access
from hangar_agent.executors import CommandResult, real_executors

NOW = datetime(2026, 12, 5, 18, 0, tzinfo=UTC)
VOLUME = "0193a1b2-0000-7000-8000-000000000001"
SSHD_T = "port 22\npubkeyauthentication yes\nauthorizedkeysfile .ssh/authorized_keys .ssh/authorized_keys2\n"


def key_line() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def fingerprint(line: str) -> str:
    digest = hashlib.sha256(base64.b64decode(line.split()[1])).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class Recorder:
    """Runs ssh-keygen for real when present; answers mount/umount/sshd/systemctl as a node would."""

    def __init__(self, sshd_output: str = SSHD_T, fail: str | None = None) -> None:
        self.argv: list[list[str]] = []
        self.sshd_output, self.fail = sshd_output, fail

    def start(self, argv):
        argv = list(argv)
        self.argv.append(argv)
        if argv[0] == self.fail:
            done = CommandResult(tuple(argv), 32, "", f"{argv[0]}: failed")
        elif argv[0] == "ssh-keygen" and shutil.which("ssh-keygen"):
            run = subprocess.run(argv, capture_output=True, text=True, check=False)
            done = CommandResult(tuple(argv), run.returncode, run.stdout, run.stderr)
        elif argv[0] == "ssh-keygen":  # no OpenSSH here: what it would print, from the file itself
            lines = Path(argv[-1]).read_text().splitlines()
            out = "".join(f"256 {fingerprint(line)} c (ED25519)\n" for line in lines)
            done = CommandResult(tuple(argv), 0, out, "")
        elif argv[0] == "sshd":
            done = CommandResult(tuple(argv), 0, self.sshd_output, "")
        else:
            done = CommandResult(tuple(argv), 0, "", "")
        return type("Done", (), {"poll": lambda self: done})()


def spec(keys: list[str], *, mounts=True, revision="r1", image=None) -> dict:
    return {
        "allocation_id": "0193a1b2-0000-7000-8000-0000000000aa",
        "user": "tenant",
        "keys": [{"id": f"k{i}", "fingerprint": fingerprint(k), "public_key": k} for i, k in enumerate(keys)],
        "image": image,
        "mounts": (
            [
                {
                    "volume_id": VOLUME,
                    "path": f"/mnt/volumes/{VOLUME}",
                    "source": f"storage.hangar.internal:/volumes/t/{VOLUME}",
                    "fstype": "nfs4",
                    "size_gb": 100,
                }
            ]
            if mounts
            else []
        ),
        "revision": revision,
    }


@pytest.fixture
def node(tmp_path):
    def passwd(user):
        if user != "tenant":
            raise KeyError(user)
        return os.getuid(), os.getgid(), "/home/tenant"

    runner = Recorder()
    stack = [{"component": "gpu_driver", "version": "570.133.20", "state": "ok"}]
    executors = with_access(real_executors(runner), runner, root=tmp_path, passwd=passwd, stack=lambda: stack)
    return tmp_path, runner, executors, stack


def run(executor, params):
    return executor.start(params, NOW).poll(NOW)


def test_provision_writes_authorized_keys_mounts_checks_and_reports_ready(node):
    root, runner, executors, _ = node
    keys = [key_line(), key_line()]
    image = {"id": "i", "name": "h100 2026.11", "versions": {"gpu_driver": "570.133.20"}}
    outcome = run(executors["provision"], {"allocation_id": "a", "access": spec(keys, image=image)})
    assert outcome["status"] == "succeeded", outcome
    path = root / "home/tenant/.ssh/authorized_keys"
    stat = path.stat()
    assert stat.st_mode & 0o777 == 0o600 and stat.st_uid == os.getuid()
    assert (root / "home/tenant/.ssh").stat().st_mode & 0o777 == 0o700
    assert [line.split()[:2] for line in path.read_text().splitlines()] == sorted(
        (k.split()[:2] for k in keys), key=lambda parts: fingerprint(" ".join(parts))
    )
    out = outcome["output"]
    assert out["ready"] is True and out["access"]["revision"] == "r1"
    assert out["facts"]["authorized_keys"] == sorted(fingerprint(k) for k in keys)
    assert out["facts"]["authorized_keys_mode"] == "0600" and out["facts"]["image_verified"]
    mount = next(a for a in runner.argv if a[0] == "mount")
    assert mount[-1] == str(root / "mnt/volumes" / VOLUME) and mount[-2].endswith(VOLUME)
    assert ["sshd", "-T", "-C", "user=tenant,host=localhost,addr=127.0.0.1"] in runner.argv


def test_a_key_change_rewrites_the_file_and_wipe_removes_keys_mounts_and_data(node):
    root, runner, executors, _ = node
    keep, drop = key_line(), key_line()
    assert run(executors["provision"], {"allocation_id": "a", "access": spec([keep, drop])})["status"] == "succeeded"
    synced = run(executors["sync_access"], {"allocation_id": "a", "access": spec([keep], revision="r2")})
    assert synced["output"]["facts"]["authorized_keys"] == [fingerprint(keep)]
    assert drop.split()[1] not in (root / "home/tenant/.ssh/authorized_keys").read_text()
    (root / TENANT_DATA_DIR / "run").mkdir(parents=True)
    (root / TENANT_DATA_DIR / "run/ckpt.bin").write_bytes(b"weights")

    stopped = run(executors["stop"], {})
    assert stopped["status"] == "succeeded" and stopped["output"]["unmounted"] == [f"/mnt/volumes/{VOLUME}"]
    wiped = run(executors["wipe"], {})
    assert wiped["status"] == "succeeded", wiped
    assert wiped["output"] == {
        "keys_removed": True,
        "user": "tenant",
        "unmounted": [f"/mnt/volumes/{VOLUME}"],
        "tenant_data_removed": True,
    }
    assert "authorized_keys of tenant removed" in wiped["detail"]
    assert not (root / "home/tenant/.ssh/authorized_keys").exists()
    assert not (root / "mnt/volumes" / VOLUME).exists()
    assert not any((root / TENANT_DATA_DIR).iterdir())
    assert not (root / MANIFEST).exists()
    assert ["umount", str(root / "mnt/volumes" / VOLUME)] in runner.argv


def test_a_failed_unmount_stops_the_wipe_before_anything_is_deleted(tmp_path):
    runner = Recorder(fail="umount")
    passwd = lambda user: (os.getuid(), os.getgid(), "/home/tenant")
    executors = with_access(real_executors(runner), runner, root=tmp_path, passwd=passwd)
    assert run(executors["provision"], {"allocation_id": "a", "access": spec([key_line()])})["status"] == "succeeded"
    (tmp_path / TENANT_DATA_DIR).mkdir(parents=True)
    (tmp_path / TENANT_DATA_DIR / "x").write_text("x")
    wiped = run(executors["wipe"], {})
    assert wiped["status"] == "failed" and "umount" in wiped["detail"]
    assert (tmp_path / TENANT_DATA_DIR / "x").exists()  # nothing deleted under a volume still mounted


@pytest.mark.parametrize(
    "sshd_output, says",
    [
        ("pubkeyauthentication no\nauthorizedkeysfile .ssh/authorized_keys\n", "pubkeyauthentication no"),
        ("pubkeyauthentication yes\nauthorizedkeysfile /etc/ssh/keys/%u\n", "not .ssh/authorized_keys"),
    ],
)
def test_sshd_that_would_refuse_the_keys_is_not_ready(tmp_path, sshd_output, says):
    runner = Recorder(sshd_output=sshd_output)
    passwd = lambda user: (os.getuid(), os.getgid(), "/home/tenant")
    executors = with_access(real_executors(runner), runner, root=tmp_path, passwd=passwd)
    outcome = run(executors["provision"], {"allocation_id": "a", "access": spec([key_line()], mounts=False)})
    assert outcome["status"] == "failed" and says in outcome["detail"]
    assert outcome["output"]["ready"] is False


def test_image_drift_fails_with_the_reason_and_changes_nothing(node):
    root, runner, executors, stack = node
    stack[0]["version"] = "565.57.01"
    image = {"id": "i", "name": "h100 2026.11", "versions": {"gpu_driver": "570.133.20"}}
    outcome = run(executors["provision"], {"allocation_id": "a", "access": spec([key_line()], image=image)})
    assert outcome["status"] == "failed"
    assert "gpu_driver 565.57.01 (image: 570.133.20)" in outcome["detail"]
    assert not (root / "home").exists() and runner.argv == []


@pytest.mark.parametrize(
    "change",
    [
        {"user": "root"},
        {"user": "a b"},
        {"keys": [{"id": "x", "fingerprint": "SHA256:x", "public_key": 'command="sh" ssh-ed25519 AAAA'}]},
        {"mounts": [{"volume_id": "../../etc", "path": "/etc", "source": "h:/x", "fstype": "nfs4"}]},
        {"mounts": [{"volume_id": VOLUME, "path": f"/mnt/volumes/{VOLUME}", "source": "h:/x;rm", "fstype": "nfs4"}]},
        {"revision": ""},
    ],
)
def test_a_malformed_spec_is_refused_before_anything_is_written(node, change):
    root, runner, executors, _ = node
    outcome = run(executors["provision"], {"allocation_id": "a", "access": {**spec([key_line()]), **change}})
    assert outcome["status"] == "failed" and outcome["detail"].startswith("not ready")
    assert not (root / "home").exists() and runner.argv == []
    with pytest.raises(ValueError):
        parse_spec({**spec([key_line()]), **change})


def test_an_unknown_account_is_not_ready(node):
    root, _, executors, _ = node
    outcome = run(executors["provision"], {"allocation_id": "a", "access": {**spec([key_line()]), "user": "ubuntu"}})
    assert outcome["status"] == "failed" and "no account 'ubuntu'" in outcome["detail"]


def test_provision_without_access_does_what_it_did_before(node):
    _, runner, executors, _ = node
    outcome = run(executors["provision"], {"allocation_id": "a"})
    assert outcome["status"] == "succeeded"
    assert runner.argv == [["systemctl", "start", "hangar-workload@a.service"]]
