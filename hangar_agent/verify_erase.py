"""Read-back verification of an erased drive, sampled across the whole device.

After an NVMe format/sanitize whose DLFEAT says erased blocks read as zeroes, every sampled
block must be zero. The samples are the first block, the last block and random blocks spread
over the whole device (a fresh seed each run, recorded in the evidence), so a drive that only
erased its beginning, or only its mapping table, fails.

Run as `python -m hangar_agent.verify_erase DEVICE [--samples N] [--seed S]`; it prints one
JSON object and exits 0 when every sample reads back as zeroes, 1 otherwise, 2 on an error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from random import Random
from typing import Any

BLOCK = 64 * 1024
SAMPLES = 64


def sample_offsets(size: int, *, rng: Random, block: int = BLOCK, samples: int = SAMPLES) -> list[int]:
    """Block-aligned offsets: the start, the end and random blocks across the device."""
    blocks = size // block
    if blocks <= 0:
        return [0] if size > 0 else []
    wanted = min(samples, blocks)
    offsets = {0, (blocks - 1) * block}
    while len(offsets) < wanted:
        offsets.add(rng.randrange(blocks) * block)
    return sorted(offsets)


def verify(path: str, *, samples: int = SAMPLES, seed: int = 0, block: int = BLOCK) -> dict[str, Any]:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        offsets = sample_offsets(size, rng=Random(seed), block=block, samples=samples)
        nonzero = []
        for offset in offsets:
            data = os.pread(fd, min(block, size - offset), offset)
            if data.count(0) != len(data):
                nonzero.append(offset)
    finally:
        os.close(fd)
    return {
        "device": path,
        "size_bytes": size,
        "block_bytes": block,
        "seed": seed,
        "samples": len(offsets),
        "first_offset": offsets[0] if offsets else None,
        "last_offset": offsets[-1] if offsets else None,
        "nonzero_offsets": nonzero[:20],
        "nonzero": len(nonzero),
        "all_zero": bool(offsets) and not nonzero,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("device")
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        report = verify(args.device, samples=max(2, min(args.samples, 100_000)), seed=args.seed)
    except OSError as exc:
        print(json.dumps({"device": args.device, "error": str(exc)}))
        return 2
    print(json.dumps(report))
    return 0 if report["all_zero"] else 1


if __name__ == "__main__":
    sys.exit(main())
