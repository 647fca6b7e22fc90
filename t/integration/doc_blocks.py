#!/usr/bin/env python3
"""Which ```sh blocks of README.md and doc/*.md no test ran.

Usage: doc_blocks.py RAN FILE...

RAN is the file in which lib.sh's doc_block notes each block a test ran,
one "PATH|HEADING|N" line each (the Nth ```sh block under HEADING).
Prints the blocks of the FILEs not in it, one a line, in the same form,
but for NOT_RUNNABLE.  run.sh calls it once every test file of a whole
run has finished (the files that run blocks may be in either shard).
"""
import sys

# systemd's block needs systemd as PID 1, which no test has;
# test_socket.sh and test_deb.sh do what its units say by hand.
NOT_RUNNABLE = {"doc/deployment.md|systemd|1"}


def main():
    ran = set(open(sys.argv[1]).read().split("\n")) | NOT_RUNNABLE
    for path in sys.argv[2:]:
        heading, counts, inside = None, {}, False
        for line in open(path):
            if line.startswith("```"):
                if not inside and line.startswith("```sh"):
                    counts[heading] = counts.get(heading, 0) + 1
                    block = "%s|%s|%d" % (path, heading, counts[heading])
                    if block not in ran:
                        print(block)
                inside = not inside
            elif line.startswith("#") and not inside:
                heading = line.lstrip("#").strip()


if __name__ == "__main__":
    main()
