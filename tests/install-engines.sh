#!/usr/bin/env bash
# Installs the rule engines the tests run beside Debian 12's Prometheus 2.42: Prometheus 3.5 LTS
# (`prometheus`, `promtool`) and VictoriaMetrics (`victoria-metrics`, `vmalert`, `vmalert-tool`,
# `vmagent`), from Debian's unstable suite, into a tools directory of their own. The system's apt
# sources stay as they are: a private apt configuration (its own source list naming `sid main` on
# the mirror the machine's apt already uses, its own lists and cache) downloads the packages and
# `dpkg-deb -x` unpacks them; nothing is installed into the system.
#
#   tests/install-engines.sh [DIR]     # DIR: $DISKPROBE_ENGINES_DIR, else target/engines
#
# The mirror serves only the current version of a package: the tested version is asked for
# first; when it is gone, the newest of the same major line is taken (another major line is an
# error). What was installed is printed and written to DIR/NAME/VERSION. The tests look for
# DIR/prometheus3/usr/bin/{prometheus,promtool} and DIR/victoria-metrics/usr/bin/{vmalert,...}
# (tests/it/common/engines.rs); docs/development.md and docs/deployment.md name the versions.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-${DISKPROBE_ENGINES_DIR:-$repo/target/engines}}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

# name in the tools directory, Debian package(s), tested version, major line.
engines=(
  "prometheus3|prometheus promtool|3.5.3+ds1-6|3.5."
  "victoria-metrics|victoria-metrics|1.145.0+ds1-2|1."
)

# The mirror the system's apt uses (deb822 sources or a one-line sources.list).
mirror="$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1 || true)"
if [ -z "$mirror" ]; then
  mirror="$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
    awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' | grep -v security | head -1 || true)"
fi
mirror="${mirror:-http://deb.debian.org/debian}"

apt_dir="$dir/.apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ -f "$keyring" ]; then
  echo "deb [signed-by=$keyring] $mirror sid main" >"$apt_dir/sources.list"
else
  echo "deb $mirror sid main" >"$apt_dir/sources.list"
fi
apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
  -o "Dir::State::Status=/var/lib/dpkg/status" -o "APT::Sandbox::User=root"
)
echo "install-engines: Debian sid on $mirror -> $dir"
apt-get "${apt_opts[@]}" update -qq

for entry in "${engines[@]}"; do
  IFS='|' read -r name packages tested line <<<"$entry"
  first="${packages%% *}"
  # Every version of the package the mirror offers (usually one).
  offered="$(apt-cache "${apt_opts[@]}" madison "$first" | awk -F'|' '{gsub(/ /, "", $2); print $2}')"
  if grep -qxF "$tested" <<<"$offered"; then
    version="$tested"
  else
    version="$(grep -E "^${line//./\\.}" <<<"$offered" | sort -V | tail -1 || true)"
    if [ -z "$version" ]; then
      echo "install-engines: $first: neither $tested nor any ${line}x is offered (offered: ${offered:-nothing})" >&2
      exit 1
    fi
    echo "install-engines: $first $tested is gone from the mirror; taking $version (same line)"
  fi
  if [ -f "$dir/$name/VERSION" ] && [ "$(cat "$dir/$name/VERSION")" = "$version" ]; then
    echo "install-engines: $name $version already in $dir/$name"
    continue
  fi
  rm -rf "${dir:?}/$name.new"
  mkdir -p "$dir/$name.new"
  for package in $packages; do
    (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -qq "$package=$version")
    dpkg-deb -x "$apt_dir/debs/${package}_${version//:/%3a}_"*.deb "$dir/$name.new"
  done
  echo "$version" >"$dir/$name.new/VERSION"
  rm -rf "${dir:?}/$name"
  mv "$dir/$name.new" "$dir/$name"
  rm -f "$apt_dir"/debs/*.deb
  echo "install-engines: $name $version (${packages}) in $dir/$name"
done

"$dir/prometheus3/usr/bin/promtool" --version 2>&1 | head -1
"$dir/prometheus3/usr/bin/prometheus" --version 2>&1 | head -1
"$dir/victoria-metrics/usr/bin/vmalert" -version 2>&1 | head -1 || true
