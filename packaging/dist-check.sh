#!/bin/sh
# dist-check: what `make dist` put in dist/ is a release. Run by
# `make dist-check` (after make dist), which `make test` runs under CI=true.
#   - checksums.txt covers every archive and package, and they match it;
#   - the four archives (linux, darwin × amd64, arm64) and the .deb and
#     .rpm of each linux arch exist, each archive holds the four binaries, the
#     licence, the notices and the unit;
#   - the binary for this machine's arch names the version it was built as;
#   - each .deb and .rpm holds the binaries, the unit and the example
#     configuration where the unit expects them (dpkg-deb; rpm when the
#     machine has it, required under CI=true);
#   - a second build from the same commit is byte for byte the same
#     (reproducible; skipped with DIST_CHECK_REBUILD=0).
# Usage: packaging/dist-check.sh VERSION
set -eu
version=$1
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/dist"
fail() { echo "dist-check: $*" >&2; exit 1; }

echo "== dist-check: checksums"
sha256sum --quiet -c checksums.txt || fail "checksums.txt does not match the files"

for os in linux darwin; do
	for arch in amd64 arm64; do
		a="agenthost_${version}_${os}_${arch}.tar.gz"
		[ -f "$a" ] || fail "missing archive $a"
		grep -q " $a\$" checksums.txt || fail "$a is not in checksums.txt"
		list=$(tar tzf "$a")
		for f in agenthost agenthost-ext-mcp agenthost-ext-runner agenthost-ext-codemode LICENSE NOTICE README.md CHANGELOG.md packaging/agenthost.service packaging/agenthost.json \
			third_party/github.com/hashicorp/go-plugin/LICENSE third_party/modernc.org/sqlite/LICENSE third_party/github.com/segmentio/asm/LICENSE; do
			echo "$list" | grep -qx "$f" || fail "$a lacks $f"
		done
		n=$(echo "$list" | grep -c '^third_party/.*LICENSE')
		[ "$n" -ge 50 ] || fail "$a holds $n third-party licence files, fewer than the 50 expected"
	done
done

echo "== dist-check: the binary names its version"
goarch=$(go env GOARCH)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "agenthost_${version}_linux_${goarch}.tar.gz" -C "$tmp"
out=$("$tmp/agenthost" version)
echo "$out" | grep -q "$version" || fail "agenthost version printed \"$out\", not $version"
echo "$out"

echo "== dist-check: packages"
for arch in amd64 arm64; do
	deb=$(ls agenthost_*_"$arch".deb 2>/dev/null | head -1)
	[ -n "$deb" ] || fail "missing the .deb for $arch"
	grep -q " $deb\$" checksums.txt || fail "$deb is not in checksums.txt"
	[ "$(dpkg-deb -f "$deb" Architecture)" = "$arch" ] || fail "$deb: Architecture is $(dpkg-deb -f "$deb" Architecture), not $arch"
	files=$(dpkg-deb -c "$deb")
	for f in ./usr/bin/agenthost ./usr/lib/agenthost/agenthost-ext-mcp ./usr/lib/agenthost/agenthost-ext-runner ./usr/lib/agenthost/agenthost-ext-codemode ./lib/systemd/system/agenthost.service ./etc/agenthost/agenthost.json \
		./usr/share/doc/agenthost/NOTICE ./usr/share/doc/agenthost/third_party/github.com/hashicorp/go-plugin/LICENSE; do
		echo "$files" | grep -q " $f\$" || fail "$deb lacks $f"
	done
	case $arch in amd64) rarch=x86_64 ;; arm64) rarch=aarch64 ;; esac
	rpm=$(ls agenthost-*."$rarch".rpm 2>/dev/null | head -1)
	[ -n "$rpm" ] || fail "missing the .rpm for $arch"
	grep -q " $rpm\$" checksums.txt || fail "$rpm is not in checksums.txt"
	if command -v rpm >/dev/null; then
		rpm -K --nosignature "$rpm" >/dev/null || fail "$rpm: rpm -K refuses it"
		[ "$(rpm -qp --qf '%{ARCH}' "$rpm" 2>/dev/null)" = "$rarch" ] || fail "$rpm: not $rarch"
		files=$(rpm -qpl "$rpm" 2>/dev/null)
		for f in /usr/bin/agenthost /usr/lib/agenthost/agenthost-ext-mcp /usr/lib/agenthost/agenthost-ext-runner /usr/lib/agenthost/agenthost-ext-codemode /lib/systemd/system/agenthost.service /etc/agenthost/agenthost.json; do
			echo "$files" | grep -qx "$f" || fail "$rpm lacks $f"
		done
		rpm -qp --scripts "$rpm" 2>/dev/null | grep -q useradd || fail "$rpm: no postinstall creating the agenthost user"
	elif [ "${CI:-}" = true ]; then
		fail "CI=true and rpm(8) is missing: the .rpm cannot be checked"
	else
		echo "SKIPPING THE .RPM CHECK: rpm(8) is missing (apt-get install rpm); under CI=true this fails" >&2
	fi
done

if [ "${DIST_CHECK_REBUILD:-1}" != 0 ]; then
	echo "== dist-check: a second build is byte for byte the same"
	cp checksums.txt "$tmp/checksums.first"
	(cd .. && make -s dist >/dev/null)
	cd "$root/dist" # GoReleaser's --clean made dist/ anew
	cmp -s checksums.txt "$tmp/checksums.first" || { diff "$tmp/checksums.first" checksums.txt >&2; fail "a second build of the same commit differs"; }
fi
echo "== dist-check: ok ($(grep -c . checksums.txt) files in checksums.txt)"
