"""Delivering a tenant's access to this node, and taking it away.

The control plane's access spec (desired-state `access`, and the `provision` / `sync_access`
work items) names the login user, the tenant's SSH public keys, the image (software versions the
node must run) and the volumes to mount. `provision` and `sync_access` apply it:

1. check the spec (user name, keys, mount paths and sources are refused unless well-formed:
   nothing from the server reaches a shell or a path outside the mount root);
2. write `~user/.ssh/authorized_keys` (the canonical public keys only, owned by the user, mode
   0600, `.ssh` 0700, replaced whole) and record what was written in a manifest;
3. mount new volumes, unmount ones no longer listed (data left intact);
4. verify the image against the node's software inventory (never upgrades it);
5. `ssh-keygen -l -f authorized_keys` must list exactly the expected fingerprints and
   `sshd -T -C user=…` must show public-key authentication on and the file in its
   `authorizedkeysfile`.

Only when every step passed is the result `ready`, with the facts checked. `stop` unmounts the
volumes (intact); `wipe` unmounts them, removes the keys, the mount points and the tenant data
and says so in its result. Everything is relative to `root` so the tests run it on a temporary
directory as the node's filesystem.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .executors import ActionRun, CommandResult, CommandRunner, CommandSequence, SubprocessRunner, _Done, result

USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
KEY = re.compile(r"^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa) [A-Za-z0-9+/]+={0,2}$")
FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
VOLUME_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
SOURCE = re.compile(r"^[A-Za-z0-9.-]{1,253}:/[A-Za-z0-9._/-]{1,500}$")
MOUNT_ROOT = "/mnt/volumes"
FSTYPES = frozenset({"nfs4", "nfs"})
MANIFEST = "var/lib/hangar/access.json"
TENANT_DATA_DIR = "var/lib/hangar/tenant"
MOUNT_OPTIONS = "nosuid,nodev,_netdev"

Passwd = Callable[[str], tuple[int, int, str]]  # user → (uid, gid, home on the node)
Stack = Callable[[], list[dict[str, Any]]]


def host_passwd(user: str) -> tuple[int, int, str]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid, entry.pw_dir


@dataclass(frozen=True)
class Mount:
    volume_id: str
    path: str
    source: str
    fstype: str


@dataclass(frozen=True)
class Spec:
    allocation_id: str
    revision: str
    user: str
    keys: tuple[tuple[str, str], ...]  # (fingerprint, public key)
    image: dict[str, Any] | None
    mounts: tuple[Mount, ...]


def parse_spec(raw: Any) -> Spec:
    """The access spec, or ValueError saying what is wrong with it."""
    if not isinstance(raw, dict):
        raise ValueError("no access spec")
    user = str(raw.get("user") or "")
    if not USER.match(user) or user == "root":
        raise ValueError(f"login user {user!r} is not an acceptable account name")
    keys = []
    for k in raw.get("keys") or []:
        line, fp = str(k.get("public_key", "")), str(k.get("fingerprint", ""))
        if not KEY.match(line) or not FINGERPRINT.fullmatch(fp):
            raise ValueError(f"key {k.get('id')!r} is not a canonical public key with its fingerprint")
        keys.append((fp, line))
    mounts = []
    for m in raw.get("mounts") or []:
        volume_id, path = str(m.get("volume_id", "")), str(m.get("path", ""))
        source, fstype = str(m.get("source", "")), str(m.get("fstype", ""))
        if not VOLUME_ID.match(volume_id) or path != f"{MOUNT_ROOT}/{volume_id}":
            raise ValueError(f"mount {volume_id!r}: its path must be {MOUNT_ROOT}/<volume id>")
        if not SOURCE.match(source) or ".." in source or fstype not in FSTYPES:
            raise ValueError(f"mount {volume_id}: source {source!r} ({fstype!r}) is not an NFS export")
        mounts.append(Mount(volume_id, path, source, fstype))
    image = raw.get("image")
    if image is not None and not (isinstance(image, dict) and isinstance(image.get("versions"), dict)):
        raise ValueError("image must name its versions")
    revision = str(raw.get("revision") or "")
    if not revision:
        raise ValueError("the access spec has no revision")
    return Spec(str(raw.get("allocation_id") or ""), revision, user, tuple(sorted(keys)), image, tuple(mounts))


def image_drift(image: dict[str, Any] | None, components: list[dict[str, Any]]) -> list[str]:
    """What the node runs that the image does not name (empty: it runs the image)."""
    if not image:
        return []
    running = {str(c.get("component")): str(c.get("version")) for c in components if c.get("state", "ok") == "ok"}
    return [
        f"{component} {running.get(component) or 'missing'} (image: {version})"
        for component, version in sorted(image["versions"].items())
        if running.get(component) != str(version)
    ]


class NodeAccess:
    """The node's side of a tenant's access, on the filesystem under `root`."""

    def __init__(self, root: str | Path = "/", passwd: Passwd = host_passwd) -> None:
        self.root = Path(root)
        self.passwd = passwd

    def on_node(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    # ---- the manifest: what this agent delivered, so stop and wipe know what to undo ----

    def manifest(self) -> dict[str, Any]:
        try:
            value = json.loads(self.on_node(MANIFEST).read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def _save_manifest(self, manifest: dict[str, Any] | None) -> None:
        path = self.on_node(MANIFEST)
        if manifest is None:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(manifest, handle)
        os.replace(partial, path)

    # ---- keys -------------------------------------------------------------------------

    def keys_file(self, user: str) -> Path:
        _, _, home = self.passwd(user)
        return self.on_node(home) / ".ssh" / "authorized_keys"

    def write_keys(self, spec: Spec) -> Path:
        """authorized_keys for the user, replaced whole: .ssh 0700, the file 0600, both the user's."""
        uid, gid, _ = self.passwd(spec.user)
        path = self.keys_file(spec.user)
        ssh_dir = path.parent
        ssh_dir.mkdir(parents=True, exist_ok=True)
        if ssh_dir.is_symlink() or path.is_symlink():
            raise ValueError(f"{ssh_dir} or its authorized_keys is a symbolic link; refusing to write through it")
        os.chmod(ssh_dir, 0o700)
        os.chown(ssh_dir, uid, gid)
        partial = ssh_dir / ".authorized_keys.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write("".join(f"{line} hangar:{fp}\n" for fp, line in spec.keys))
        os.chown(partial, uid, gid)
        os.replace(partial, path)
        return path

    def remove_keys(self, user: str) -> bool:
        try:
            path = self.keys_file(user)
        except KeyError:
            return False
        if path.exists() or path.is_symlink():
            path.unlink()
            return True
        return False

    # ---- mounts ---------------------------------------------------------------------------

    def mounted(self) -> set[str] | None:
        """Mount points under the mount root, from the node's /proc/mounts (None: unknown)."""
        try:
            lines = self.on_node("/proc/mounts").read_text().splitlines()
        except FileNotFoundError:
            return None
        points = {line.split()[1] for line in lines if len(line.split()) > 1}
        return {p for p in points if p.startswith(MOUNT_ROOT + "/")}

    def mount_commands(self, spec: Spec, previous: list[str]) -> tuple[list[list[str]], list[str]]:
        """(commands, the mount points they unmount): mount what is new, unmount what left."""
        mounted = self.mounted() or set()
        commands, leaving = [], []
        for path in previous:
            if path not in {m.path for m in spec.mounts}:
                leaving.append(path)
                commands.append(["umount", str(self.on_node(path))])
        for m in spec.mounts:
            target = self.on_node(m.path)
            target.mkdir(parents=True, exist_ok=True)
            if m.path not in mounted:
                commands.append(["mount", "-t", m.fstype, "-o", MOUNT_OPTIONS, m.source, str(target)])
        return commands, leaving


class AccessExecutor:
    """`provision` / `sync_access` on a real node: apply the spec, check, report ready with facts."""

    def __init__(self, node: NodeAccess, runner: CommandRunner, stack: Stack | None = None) -> None:
        self.node, self.runner, self.stack = node, runner, stack

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        try:
            spec = parse_spec(params.get("access"))
            _, _, home = self.node.passwd(spec.user)
        except KeyError:
            return _Done(result("failed", f"not ready: the image has no account {params['access'].get('user')!r}"))
        except ValueError as exc:
            return _Done(result("failed", f"not ready: {exc}"))
        if self.stack is not None:
            drift = image_drift(spec.image, self.stack())
            if drift:
                name = (spec.image or {}).get("name", "the image")
                return _Done(
                    result(
                        "failed",
                        f"not ready: the node does not run {name}: " + "; ".join(drift),
                        {"ready": False, "image_drift": drift},
                    )
                )
        previous = self.node.manifest()
        try:
            keys_path = self.node.write_keys(spec)
            commands, leaving = self.node.mount_commands(spec, list(previous.get("mounts") or []))
        except (OSError, ValueError) as exc:
            return _Done(result("failed", f"not ready: {exc}"))
        self.node._save_manifest(
            {
                "allocation_id": spec.allocation_id,
                "revision": spec.revision,
                "user": spec.user,
                "mounts": [m.path for m in spec.mounts],
            }
        )
        commands += [
            ["ssh-keygen", "-l", "-f", str(keys_path)],
            ["sshd", "-T", "-C", f"user={spec.user},host=localhost,addr=127.0.0.1"],
        ]
        if not spec.keys:
            commands.remove(["ssh-keygen", "-l", "-f", str(keys_path)])  # it exits 1 on an empty file
        return CommandSequence(self.runner, commands, lambda done: self._judge(spec, keys_path, leaving, done))

    def _judge(self, spec: Spec, keys_path: Path, leaving: list[str], done: list[CommandResult]) -> dict[str, Any]:
        failed = next((c for c in done if c.returncode != 0), None)
        log = [{"argv": list(c.argv), "returncode": c.returncode} for c in done]
        if failed is not None:
            return result(
                "failed",
                f"not ready: {' '.join(failed.argv)} exited {failed.returncode}: {failed.stderr.strip()[-300:]}",
                {"ready": False, "commands": log},
            )
        listed = set()
        sshd: dict[str, str] = {}
        for c in done:
            if c.argv[0] == "ssh-keygen":  # "<bits> <fingerprint> <comment> (<type>)" per key it could read
                listed = {
                    line.split()[1]
                    for line in c.stdout.splitlines()
                    if len(line.split()) > 1 and FINGERPRINT.fullmatch(line.split()[1])
                }
            if c.argv[0] == "sshd":
                for line in c.stdout.splitlines():
                    name, _, value = line.partition(" ")
                    sshd[name.lower()] = value.strip()
        expected = {fp for fp, _ in spec.keys}
        problems = []
        if listed != expected:
            problems.append(f"authorized_keys lists {sorted(listed)}, expected {sorted(expected)}")
        if sshd.get("pubkeyauthentication") != "yes":
            problems.append(f"sshd has pubkeyauthentication {sshd.get('pubkeyauthentication', 'unset')}")
        if ".ssh/authorized_keys" not in sshd.get("authorizedkeysfile", ".ssh/authorized_keys"):
            problems.append(f"sshd reads keys from {sshd.get('authorizedkeysfile')}, not .ssh/authorized_keys")
        if problems:
            return result("failed", "not ready: " + "; ".join(problems), {"ready": False, "commands": log})
        stat = keys_path.stat()
        facts = {
            "user": spec.user,
            "authorized_keys": sorted(listed),
            "authorized_keys_mode": f"{stat.st_mode & 0o777:04o}",
            "authorized_keys_uid": stat.st_uid,
            "mounts": [m.path for m in spec.mounts],
            "unmounted": leaving,
            "image": (spec.image or {}).get("name"),
            "image_verified": self.stack is not None and spec.image is not None,
            "sshd_pubkeyauthentication": sshd.get("pubkeyauthentication"),
        }
        return result(
            "succeeded",
            f"ready: {spec.user} accepts {len(expected)} key(s); {len(spec.mounts)} volume(s) mounted",
            {"ready": True, "access": {"allocation_id": spec.allocation_id, "revision": spec.revision}, "facts": facts},
        )


Commands = Callable[[dict[str, Any]], list[list[str]]]


class Unmounting:
    """`stop` and `wipe` on a real node: `before` (stop the workload), unmount the tenant's
    volumes (left intact), `after` (a wipe's discards); a wipe then removes the keys, the mount
    points and the tenant data, and says what it removed."""

    def __init__(
        self,
        node: NodeAccess,
        runner: CommandRunner,
        *,
        wipe: bool,
        before: Commands | None = None,
        after: Commands | None = None,
    ) -> None:
        self.node, self.runner, self.wipe = node, runner, wipe
        self.before = before or (lambda params: [])
        self.after = after or (lambda params: [])

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        manifest = self.node.manifest()
        mounts = [p for p in manifest.get("mounts") or [] if str(p).startswith(MOUNT_ROOT + "/")]
        mounted = self.node.mounted()
        unmount = [["umount", str(self.node.on_node(p))] for p in mounts if mounted is None or p in mounted]
        try:
            commands = self.before(params) + unmount + self.after(params)
        except (KeyError, ValueError, TypeError) as exc:
            return _Done(result("failed", f"bad params {params!r}: {exc}"))
        return CommandSequence(self.runner, commands, lambda done: self._finish(manifest, mounts, done))

    def _finish(self, manifest: dict[str, Any], mounts: list[str], done: list[CommandResult]) -> dict[str, Any]:
        failed = next((c for c in done if c.returncode != 0), None)
        name = "wipe" if self.wipe else "stop"
        if failed is not None:
            return result(
                "failed",
                f"{name}: {' '.join(failed.argv)} exited {failed.returncode}: {failed.stderr.strip()[-300:]}",
                {"commands": [{"argv": list(c.argv), "returncode": c.returncode} for c in done]},
            )
        if not self.wipe:
            return result(
                "succeeded", f"stop: {len(mounts)} volume(s) unmounted, data left intact", {"unmounted": mounts}
            )
        removed_keys = bool(manifest.get("user")) and self.node.remove_keys(str(manifest["user"]))
        for path in mounts:
            target = self.node.on_node(path)
            if target.is_dir() and not any(target.iterdir()):
                target.rmdir()
        data = self.node.on_node(TENANT_DATA_DIR)
        if data.is_dir():
            for child in data.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        self.node._save_manifest(None)
        output = {
            "keys_removed": removed_keys,
            "user": manifest.get("user"),
            "unmounted": mounts,
            "tenant_data_removed": True,
        }
        return result(
            "succeeded",
            f"wipe: authorized_keys of {manifest.get('user') or 'no tenant user'} "
            f"{'removed' if removed_keys else 'absent'}, {len(mounts)} volume(s) unmounted, tenant data removed",
            output,
        )


class _AccessOr:
    """`provision` with an access spec delivers it; without one (an older control plane) it does
    what it did before."""

    def __init__(self, access: AccessExecutor, fallback: Any) -> None:
        self.access, self.fallback = access, fallback

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        return (self.access if params.get("access") else self.fallback).start(params, now)


def with_access(
    executors: dict[str, Any],
    runner: CommandRunner | None = None,
    *,
    root: str | Path = "/",
    passwd: Passwd = host_passwd,
    stack: Stack | None = None,
) -> dict[str, Any]:
    """A real node's executors with access delivery: provision and sync_access apply the spec,
    stop unmounts the volumes, wipe also removes keys, mounts and tenant data (root "/" in
    production; a temporary directory in the tests)."""
    runner = runner or SubprocessRunner()
    node = NodeAccess(root, passwd)
    access = AccessExecutor(node, runner, stack)
    workload = "hangar-workload@*.service"
    return {
        **executors,
        "provision": _AccessOr(access, executors["provision"]),
        "sync_access": access,
        "stop": Unmounting(node, runner, wipe=False, before=lambda p: [["systemctl", "stop", workload]]),
        "wipe": Unmounting(
            node,
            runner,
            wipe=True,
            before=lambda p: [["systemctl", "stop", workload]],
            after=lambda p: [["blkdiscard", "-f", str(d)] for d in p.get("devices", [])],
        ),
    }


# ---- simulated nodes ------------------------------------------------------------------------


class SimulatedAccess:
    """What a simulated node holds of its tenant: the user, keys and mounts last applied."""

    def __init__(self) -> None:
        self.spec: Spec | None = None

    def facts(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "simulated": True,
            "user": spec.user if spec else None,
            "authorized_keys": [fp for fp, _ in spec.keys] if spec else [],
            "authorized_keys_mode": "0600",
            "mounts": [m.path for m in spec.mounts] if spec else [],
            "image": (spec.image or {}).get("name") if spec else None,
            "sshd_pubkeyauthentication": "yes",
        }


class SimulatedAccessExecutor:
    """`provision` / `sync_access` on a simulated node: the image is laid down (the stack is
    re-imaged to its versions, or the provision fails when the repository lacks one), the keys
    and mounts are applied, and the node reports ready with what it "checked"."""

    def __init__(
        self,
        hardware: Any,
        stack: Any,
        rng: Any,
        state: SimulatedAccess,
        seconds: tuple[float, float],
        *,
        lay_down_image: bool,
    ) -> None:
        self.hardware, self.stack, self.rng, self.state, self.seconds = hardware, stack, rng, state, seconds
        self.lay_down_image = lay_down_image

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        try:
            spec = parse_spec(params.get("access"))
        except ValueError as exc:
            return _Done(result("failed", f"not ready: {exc}"))
        done_at = now + self.hardware.wall(self.rng.uniform(*self.seconds))
        return _Timed(done_at, lambda: self._apply(spec))

    def _apply(self, spec: Spec) -> dict[str, Any]:
        problems = self.hardware.fault_summary(level=1)
        if problems:
            return result("failed", "not ready: " + "; ".join(problems), {"ready": False})
        if self.lay_down_image and spec.image:
            why = self.stack.upgrade({str(k): str(v) for k, v in spec.image["versions"].items()})
            if why:
                return result("failed", f"not ready: image {spec.image.get('name')}: {why}", {"ready": False})
            drift = image_drift(spec.image, self.stack.components())
            if drift:
                return result("failed", "not ready: the node does not run the image: " + "; ".join(drift))
        self.state.spec = spec
        return result(
            "succeeded",
            f"ready: {spec.user} accepts {len(spec.keys)} key(s); {len(spec.mounts)} volume(s) mounted (simulated)",
            {
                "ready": True,
                "access": {"allocation_id": spec.allocation_id, "revision": spec.revision},
                "facts": self.state.facts(),
            },
        )


class SimulatedTakeAway:
    """Wraps a simulated `stop` / `wipe`: the volumes are unmounted; a wipe also drops the keys
    and the tenant's data, and its result says so."""

    def __init__(self, inner: Any, state: SimulatedAccess, *, wipe: bool) -> None:
        self.inner, self.state, self.wipe = inner, state, wipe

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        run = self.inner.start(params, now)
        state, wipe = self.state, self.wipe

        class _Run:
            def poll(self, moment: datetime) -> dict[str, Any] | None:
                outcome = run.poll(moment)
                if outcome is None or outcome["status"] != "succeeded":
                    return outcome
                spec = state.spec
                mounts = [m.path for m in spec.mounts] if spec else []
                output = dict(outcome.get("output") or {}, unmounted=mounts)
                if wipe:
                    output.update(keys_removed=bool(spec and spec.keys), user=spec.user if spec else None)
                    output["tenant_data_removed"] = True
                    state.spec = None
                    detail = (
                        f"{outcome['detail']}; authorized_keys of {spec.user if spec else 'no tenant user'} removed, "
                        f"{len(mounts)} volume(s) unmounted, tenant data removed"
                    )
                else:
                    detail = f"{outcome['detail']}; {len(mounts)} volume(s) unmounted, data left intact"
                return {**outcome, "detail": detail, "output": output}

        return _Run()


class _Timed:
    def __init__(self, done_at: datetime, outcome: Callable[[], dict[str, Any]]) -> None:
        self.done_at, self.outcome = done_at, outcome

    def poll(self, now: datetime) -> dict[str, Any] | None:
        return self.outcome() if now >= self.done_at else None


def with_simulated_access(executors: dict[str, Any], hardware: Any, stack: Any, rng: Any) -> dict[str, Any]:
    """A simulated node's executors with access delivery (provision 60-180 s, a key change 2-10 s)."""
    state = SimulatedAccess()
    provision = SimulatedAccessExecutor(hardware, stack, rng, state, (60, 180), lay_down_image=True)
    return {
        **executors,
        "provision": _AccessOr(provision, executors["provision"]),
        "sync_access": SimulatedAccessExecutor(hardware, stack, rng, state, (2, 10), lay_down_image=False),
        "stop": SimulatedTakeAway(executors["stop"], state, wipe=False),
        "wipe": SimulatedTakeAway(executors["wipe"], state, wipe=True),
    }
