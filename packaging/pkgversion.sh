#!/bin/sh
# pkgversion.sh VERSION: the packages' version for a `git describe` version.
# The tag without its v; commits past the tag become build metadata
# (v0.1.0-3-gabc -> 0.1.0+3.gabc), so that such a package sorts after the
# release in dpkg and rpm, not before it as a pre-release would; dev ->
# 0.0.0-dev.
case $1 in
dev*) echo 0.0.0-dev ;;
*) echo "$1" | sed -E 's/^v//; s/-([0-9]+)-g([0-9a-f]+)/+\1.g\2/; s/\+(.*)-dirty$/+\1.dirty/; s/-dirty$/+dirty/' ;;
esac
