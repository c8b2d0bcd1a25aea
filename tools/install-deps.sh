#!/usr/bin/env bash
# install-deps.sh - installs the Debian packages ncclprobe needs to build,
# test and benchmark. Idempotent: packages already present are skipped, and
# apt is not touched at all when everything is there.
set -euo pipefail

packages=(
    make gcc g++ clang llvm pkg-config           # build (clang: the BPF backend)
    libclang-rt-14-dev                           # make fuzz: clang's libFuzzer and sanitizers
    libbpf-dev bpftool                           # BPF loading, skeletons
    libelf-dev libdw-dev elfutils zlib1g-dev     # ELF symbols, libdw symbolization
    libcjson-dev                                 # summary.json
    python3 python3-pytest python3-pip           # tests; pip fetches the runtime matrix
    gdb                                          # the independent stack oracle in tests
    strace musl-tools                            # injector tests: a tracer, a musl program
    bpftrace linux-perf                          # benchmark peers
    debhelper dpkg-dev                           # make deb (packaging/)
    protobuf-c-compiler libprotobuf-c-dev        # profile.pb.gz (pprof's profile.proto)
    libmicrohttpd-dev                            # the daemon's HTTP endpoints
    prometheus                                   # tests: a real Prometheus scrapes them
    golang-go chromium                           # tests: go tool pprof reads it; the SVG renders
    systemd man-db groff-base                    # packaging tests: systemd-analyze, man
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing ${missing[*]}; run as root: sudo $0" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
