#!/usr/bin/env python3
"""Each NAME in DIR is a regular file, not a link or a FIFO: prints what is wrong and fails otherwise.

usage: regular-files.py DIR NAME...
"""
import os
import stat
import sys


def main():
    folder, names = sys.argv[1], sys.argv[2:]
    wrong = []
    for name in names:
        mode = os.lstat(os.path.join(folder, name)).st_mode
        if not stat.S_ISREG(mode):
            wrong.append("%s is not a regular file (mode %o)" % (name, mode))
    if wrong:
        sys.exit("regular-files.py: " + "; ".join(wrong))


if __name__ == "__main__":
    main()
