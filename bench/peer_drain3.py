"""Peer for bench/templates.sh: Drain3 (PyPI `drain3`) on the same raw lines, with its IP,
hex and number masking on (the masking instructions of Drain3's example drain3.ini). Only the
mining loop is timed, as in our example binary. Prints one JSON summary line."""
import json
import sys
import time

from drain3 import TemplateMiner
from drain3.masking import MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig


def main(path):
    config = TemplateMinerConfig()
    config.masking_instructions = [
        MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})((?=[^A-Za-z0-9])|$)", "IP"),
        MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)(0x[a-f0-9A-F]+)((?=[^A-Za-z0-9])|$)", "HEX"),
        MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)([\-\+]?\d+)((?=[^A-Za-z0-9])|$)", "NUM"),
    ]
    config.profiling_enabled = False
    miner = TemplateMiner(config=config)
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    start = time.perf_counter()
    for line in lines:
        miner.add_log_message(line)
    seconds = time.perf_counter() - start
    print(json.dumps({
        "miner": "drain3",
        "lines": len(lines),
        "seconds": round(seconds, 3),
        "lines_per_second": round(len(lines) / seconds),
        "templates": len(miner.drain.clusters),
    }))


if __name__ == "__main__":
    main(sys.argv[1])
