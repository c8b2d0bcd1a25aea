#!/usr/bin/env bash
# fetch-runtimes.sh - fetch a pinned matrix of NVIDIA runtime libraries
# (libcudart, libnccl, libcupti) from their PyPI wheels into a cache outside
# the source tree, for ncclprobe's offline checks: symbol tables, DWARF
# layouts, uprobe offsets. No GPU is needed to fetch or to use them that way.
#
#   fetch-runtimes.sh [--dir DIR] [--full] [--only LIST] [--verify] [--list] [-q]
#
#   --dir DIR    cache (default $NCCLPROBE_RUNTIMES_DIR or ~/.cache/ncclprobe/runtimes)
#   --full       keep libnccl byte-identical to the wheel (device code included;
#                needed to run NCCL on a GPU from the cache). Default is "slim":
#                libnccl's device-code sections (.nv_fatbin, __nv_relfatbin, ~90%
#                of the file) become holes (zeros) in a sparse file of the same
#                size, so every file offset, the build id, .symtab and DWARF are
#                unchanged and the library still dlopens and runs host code, but
#                the matrix takes ~0.33 GB on disk instead of ~2.6 GB. libcudart
#                and libcupti are always kept whole. Also: NCCLPROBE_RUNTIMES_FULL=1.
#                (Copy a slim cache with cp --sparse=always / tar -S, or it inflates.)
#   --only LIST  comma-separated entry names or prefixes (cudart,nccl-2.27.5,...)
#   --verify     re-hash every installed file against the stamp
#   --list       print the matrix and exit
#   -q           quiet
#
# Layout: DIR/<name>/lib/<soname> (+ include/ headers for nccl and cupti),
# DIR/<name>/.stamp (wheel sha256, mode, each file's sha256 and size) and
# DIR/MANIFEST.tsv. A second run finds every stamp and does nothing.
# Wheels are downloaded to DIR/.tmp, checked (pip --require-hashes and our
# own sha256 check), unpacked (each file checked against the wheel's RECORD)
# and deleted. The toolkit's own libraries ($CUDA_HOME, default /usr/local/cuda)
# are linked in as <lib>-<major.minor> when present (the CUDA 13.0 entries).
set -euo pipefail

CACHE=${NCCLPROBE_RUNTIMES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclprobe/runtimes}
MODE=slim
[[ ${NCCLPROBE_RUNTIMES_FULL:-0} == 1 ]] && MODE=full
ONLY=""
VERIFY=0
QUIET=0
LIST=0
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
    --dir) CACHE=$2; shift 2 ;;
    --dir=*) CACHE=${1#*=}; shift ;;
    --full) MODE=full; shift ;;
    --slim) MODE=slim; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#*=}; shift ;;
    --verify) VERIFY=1; shift ;;
    --list) LIST=1; shift ;;
    -q) QUIET=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "fetch-runtimes: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

# name | package | version | wheel sha256 | members (src=>dst, comma-separated; a src
# ending in /* takes that folder's files) | who ships it (from the PyPI metadata of
# the torch, vLLM and SGLang wheels; `--list` prints it). CUDA 13.0's cudart and
# CUPTI (torch 2.11-2.14, vLLM 0.25.1, 0.33.0) come from the toolkit, linked in below.
MATRIX=$(cat <<'EOF'
cudart-12.4|nvidia-cuda-runtime-cu12|12.4.127|64403288fa2136ee8e467cdc9c9427e0434110899d07c779f25b5c068934faa5|nvidia/cuda_runtime/lib/libcudart.so.12=>lib/libcudart.so.12|torch 2.5.x/2.6.0 -> vLLM 0.6.6, 0.8.5; SGLang 0.4.6
cudart-12.6|nvidia-cuda-runtime-cu12|12.6.77|ba3b56a4f896141e25e19ab287cd71e52a6a0f4b29d0d31609f60e3b4d5219b7|nvidia/cuda_runtime/lib/libcudart.so.12=>lib/libcudart.so.12|torch 2.7.0/2.7.1
cudart-12.8|nvidia-cuda-runtime-cu12|12.8.90|adade8dcbd0edf427b7204d480d6066d33902cab2a4707dcfc48a2d0fd44ab90|nvidia/cuda_runtime/lib/libcudart.so.12=>lib/libcudart.so.12|torch 2.8.0-2.10.0 -> vLLM 0.10.2, 0.11.2, 0.16.0; SGLang 0.5.2, 0.5.10
cudart-12.9|nvidia-cuda-runtime-cu12|12.9.79|25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3|nvidia/cuda_runtime/lib/libcudart.so.12=>lib/libcudart.so.12|torch +cu129 builds (PyTorch index); newest CUDA 12
cudart-13.2|nvidia-cuda-runtime|13.2.86|3498247680dfddce31bad102af7e3e26fc795342a3cac64722bb0fa95e7f60f0|nvidia/cu13/lib/libcudart.so.13=>lib/libcudart.so.13|torch 2.15.0 (cuda-toolkit 13.2.2)
cudart-13.5|nvidia-cuda-runtime|13.5.37|df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d|nvidia/cu13/lib/libcudart.so.13=>lib/libcudart.so.13|newest CUDA 13 runtime on the index
cupti-12.4|nvidia-cuda-cupti-cu12|12.4.127|9dec60f5ac126f7bb551c055072b69d85392b13311fcc1bcda2202d172df30fb|nvidia/cuda_cupti/lib/libcupti.so.12=>lib/libcupti.so.12,nvidia/cuda_cupti/include/*=>include/|torch 2.5.x/2.6.0
cupti-12.6|nvidia-cuda-cupti-cu12|12.6.80|6768bad6cab4f19e8292125e5f1ac8aa7d1718704012a0e3272a6f61c4bce132|nvidia/cuda_cupti/lib/libcupti.so.12=>lib/libcupti.so.12,nvidia/cuda_cupti/include/*=>include/|torch 2.7.x
cupti-12.8|nvidia-cuda-cupti-cu12|12.8.90|ea0cb07ebda26bb9b29ba82cda34849e73c166c18162d3913575b0c9db9a6182|nvidia/cuda_cupti/lib/libcupti.so.12=>lib/libcupti.so.12,nvidia/cuda_cupti/include/*=>include/|torch 2.8.0-2.10.0
cupti-12.9|nvidia-cuda-cupti-cu12|12.9.79|096bcf334f13e1984ba36685ad4c1d6347db214de03dbb6eebb237b41d9d934f|nvidia/cuda_cupti/lib/libcupti.so.12=>lib/libcupti.so.12,nvidia/cuda_cupti/include/*=>include/|torch +cu129 builds
cupti-13.2|nvidia-cuda-cupti|13.2.86|8fa29f15dd8336181f961764d9d95236fc6b931dd0c8fcf8cd70aab0c310b586|nvidia/cu13/lib/libcupti.so.13=>lib/libcupti.so.13,nvidia/cu13/include/*=>include/|torch 2.15.0
cupti-13.5|nvidia-cuda-cupti|13.5.25|9dcca41c12a734192b14e7128ae116bc9ce1b9da686e2ebf48ae7a4415f76650|nvidia/cu13/lib/libcupti.so.13=>lib/libcupti.so.13,nvidia/cu13/include/*=>include/|newest CUPTI
nccl-2.21.5|nvidia-nccl-cu12|2.21.5|8579076d30a8c24988834445f8d633c697d42397e92ffc3f63fa26766d25e0a0|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|torch 2.5.x/2.6.0 -> vLLM 0.6.6, 0.8.5; SGLang 0.4.6
nccl-2.23.4|nvidia-nccl-cu12|2.23.4|b097258d9aab2fa9f686e33c6fe40ae57b27df60cedbd15d139701bb5509e0c1|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|NGC containers and manual installs (no torch default pins it)
nccl-2.26.2|nvidia-nccl-cu12|2.26.2|694cf3879a206553cc9d7dbda76b13efaf610fdb70a50cba303de1b0d1530ac6|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|torch 2.7.0/2.7.1
nccl-2.27.3|nvidia-nccl-cu12|2.27.3|adf27ccf4238253e0b826bce3ff5fa532d65fc42322c8bfdfaf28024c0fbe039|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|torch 2.8.0 -> vLLM 0.10.2; SGLang 0.5.2
nccl-2.27.5|nvidia-nccl-cu12|2.27.5|ad730cf15cb5d25fe849c6e6ca9eb5b76db16a80f13f425ac68d8e2e55624457|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|torch 2.9.x/2.10.0 -> vLLM 0.11.2, 0.16.0; SGLang 0.5.10
nccl-2.28.9|nvidia-nccl-cu13|2.28.9|e4553a30f34195f3fa1da02a6da3d6337d28f2003943aa0a3d247bbc25fefc42|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|torch 2.11.0 -> vLLM 0.25.1 (the CUDA 13.0 toolkit ships the same bytes)
nccl-2.29.7|nvidia-nccl-cu13|2.29.7|edd81538446786ec3b73972543e53bb43bcaf0bfc8ef76cb679fcc390ffe136d|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|torch 2.12.1, 2.13.0
nccl-2.30.7|nvidia-nccl-cu13|2.30.7|cefa7fdb9710efd0f39c5f1be1d61ff6fc9a996c451265bd7fbdcf9455ed4b50|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|torch 2.14.x, 2.15.0 -> vLLM 0.33.0
nccl-2.32.3|nvidia-nccl-cu13|2.32.3|1459723080ac889d73a26edfa3e04383a7928ab31ac8f0ec43b3ea9548b04ff3|nvidia/nccl/lib/libnccl.so.2=>lib/libnccl.so.2,nvidia/nccl/include/nccl.h=>include/nccl.h|newest NCCL on the index
EOF
)

# Every tag the pinned wheels carry (pip needs the exact ones with --platform).
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_25_x86_64
    manylinux_2_18_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)

say() { ((QUIET)) || echo "fetch-runtimes: $*" >&2; }
die() { echo "fetch-runtimes: $*" >&2; exit 1; }

selected() { # name
    [[ -z $ONLY ]] && return 0
    local IFS=, want
    for want in $ONLY; do [[ $1 == "$want"* ]] && return 0; done
    return 1
}

if ((LIST)); then
    while IFS='|' read -r name pkg ver _ _ who; do
        selected "$name" && printf '%-12s %-26s %-9s %s\n' "$name" "$pkg" "$ver" "$who"
    done <<<"$MATRIX"
    exit 0
fi

# Debian's python3 (with python3-pip) first: a pyenv shim may lack pip.
PY=${PYTHON:-}
[[ -n $PY ]] || PY=$(command -v /usr/bin/python3 || command -v python3 || true)
[[ -n $PY ]] || die "python3 is needed"
"$PY" -m pip --version >/dev/null 2>&1 || die "pip is needed ($PY -m pip: apt-get install python3-pip)"
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
exec 9>"$CACHE/.lock"
flock -n 9 || { say "another run holds $CACHE/.lock; waiting"; flock 9; }
# whatever a failed or interrupted run leaves half-done (finished entries were moved in place)
trap 'rm -rf "$CACHE/.tmp" "$CACHE"/.stage-*' EXIT

# The unpacker: wheel -> staging dir; RECORD check; slim libnccl; stamp.
# argv: wheel stage name package version wheel_sha mode members
HELPER=$(cat <<'PY'
import base64, hashlib, os, shutil, struct, sys, zipfile

wheel, stage, name, pkg, ver, wsha, mode, members = sys.argv[1:9]
DEVICE_SECTIONS = {b".nv_fatbin", b"__nv_relfatbin"}

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()

def device_ranges(path):
    """[(offset, size)] of the device-code sections of an x86-64 ELF."""
    with open(path, "rb") as f:
        eh = f.read(64)
        if eh[:4] != b"\x7fELF" or eh[4] != 2:
            return []
        shoff, = struct.unpack_from("<Q", eh, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", eh, 0x3A)
        f.seek(shoff)
        sh = f.read(shentsize * shnum)
        secs = [struct.unpack_from("<IIQQQQIIQQ", sh, i * shentsize) for i in range(shnum)]
        stroff, strsize = secs[shstrndx][4], secs[shstrndx][5]
        f.seek(stroff)
        strtab = f.read(strsize)
    out = []
    for s in secs:
        nm = strtab[s[0]:strtab.index(b"\0", s[0])]
        if nm in DEVICE_SECTIONS and s[1] != 8 and s[5] > (1 << 16):  # not NOBITS
            out.append((s[4], s[5]))
    return sorted(out)

def slim_copy(src, dst, holes):
    """dst = src with holes (zeros, sparse); same size and offsets."""
    size = os.path.getsize(src)
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        pos = 0
        for off, ln in holes + [(size, 0)]:
            fi.seek(pos)
            left = off - pos
            while left > 0:
                blk = fi.read(min(left, 1 << 20))
                fo.write(blk)
                left -= len(blk)
            pos = off + ln
            fo.seek(pos)
        fo.truncate(size)
    shutil.copymode(src, dst)

z = zipfile.ZipFile(wheel)
names = z.namelist()
record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
record = {}
for line in z.read(record_name).decode().splitlines():
    parts = line.rsplit(",", 2)
    if len(parts) == 3 and parts[1].startswith("sha256="):
        record[parts[0]] = parts[1][7:]

plan = []
for m in members.split(","):
    src, dst = m.split("=>")
    if src.endswith("/*"):
        pre = src[:-1]
        for n in names:
            if n.startswith(pre) and not n.endswith("/") and not n.endswith("__init__.py"):
                plan.append((n, dst + n[len(pre):]))
    else:
        if src not in names:
            sys.exit(f"{name}: {src} is not in {os.path.basename(wheel)}")
        plan.append((src, dst))

stamp = [f"wheel={os.path.basename(wheel)} sha256={wsha} mode={mode}", f"package={pkg}=={ver}"]
for src, dst in plan:
    out = os.path.join(stage, dst)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with z.open(src) as fi, open(out, "wb") as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)
    digest = sha256_file(out)
    want = record.get(src)
    got = base64.urlsafe_b64encode(bytes.fromhex(digest)).rstrip(b"=").decode()
    if want is None or want != got:
        sys.exit(f"{name}: {src} does not match the wheel's RECORD ({want} != {got})")
    line = f"{dst} size={os.path.getsize(out)} sha256={digest}"
    if ".so" in dst:
        os.chmod(out, 0o755)
        holes = device_ranges(out) if mode == "slim" else []
        if holes:
            tmp = out + ".slim"
            slim_copy(out, tmp, holes)
            os.replace(tmp, out)
            line += f" slim-sha256={sha256_file(out)} holes=" + ";".join(f"{o:#x}+{l:#x}" for o, l in holes)
    stamp.append(line)
with open(os.path.join(stage, ".stamp"), "w") as f:
    f.write("\n".join(stamp) + "\n")
PY
)

# verify_stamp DIR: every file of the stamp still has its sha256.
verify_stamp() {
    "$PY" - "$1" <<'PY'
import hashlib, os, sys
d = sys.argv[1]
bad = 0
for line in open(os.path.join(d, ".stamp")).read().splitlines()[2:]:
    path, *kv = line.split()
    kv = dict(x.split("=", 1) for x in kv)
    want = kv.get("slim-sha256", kv["sha256"])
    h = hashlib.sha256()
    with open(os.path.join(d, path), "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    if h.hexdigest() != want:
        print(f"fetch-runtimes: {d}/{path}: sha256 mismatch", file=sys.stderr)
        bad = 1
sys.exit(bad)
PY
}

fetch_one() { # name pkg ver sha members
    local name=$1 pkg=$2 ver=$3 sha=$4 members=$5
    local dest="$CACHE/$name" tmp="$CACHE/.tmp/$name" stage="$CACHE/.stage-$name"
    local mode=$MODE
    [[ $name == nccl-* ]] || mode=full # only libnccl carries device code worth dropping
    local head="sha256=$sha mode=$mode"
    if [[ -f $dest/.stamp ]] && head -1 "$dest/.stamp" | grep -qF -- "$head"; then
        if ((VERIFY)); then
            verify_stamp "$dest" || die "$name: verification failed (remove $dest and rerun)"
            say "$name: verified"
        fi
        return 0
    fi
    say "$name: fetching $pkg==$ver ($mode)"
    rm -rf "$tmp" "$stage"
    mkdir -p "$tmp" "$stage"
    printf '%s==%s --hash=sha256:%s\n' "$pkg" "$ver" "$sha" >"$tmp/req.txt"
    local plat=()
    for p in "${PLATFORMS[@]}"; do plat+=(--platform "$p"); done
    "$PY" -m pip download --quiet --no-cache-dir --no-deps --only-binary=:all: \
        "${plat[@]}" --python-version 3.11 --implementation py --abi none \
        --require-hashes -r "$tmp/req.txt" -d "$tmp/wheel" >&2 ||
        die "$name: pip download of $pkg==$ver failed"
    local whl
    whl=$(find "$tmp/wheel" -name '*.whl' | head -1)
    [[ -n $whl ]] || die "$name: no wheel downloaded"
    local got
    got=$(sha256sum "$whl" | cut -d' ' -f1)
    [[ $got == "$sha" ]] || die "$name: $(basename "$whl") has sha256 $got, pinned $sha"
    "$PY" -c "$HELPER" "$whl" "$stage" "$name" "$pkg" "$ver" "$sha" "$mode" "$members" ||
        die "$name: unpacking failed"
    rm -rf "$dest"
    mv "$stage" "$dest"
    rm -rf "$tmp"
}

# Links to the toolkit's own copies (CUDA 13.0 here), version from its dist-info.
link_toolkit() { # lib soname dist-info-prefix
    local lib=$1 so=$2 prefix=$3 file="$CUDA_HOME/lib64/$2" info ver mm
    [[ -f $file ]] || return 0
    info=$(find "$CUDA_HOME/dist-info" -maxdepth 1 -name "$prefix-*.dist-info" 2>/dev/null | sort | head -1 || true)
    ver=${info##*/"$prefix"-}
    ver=${ver%.dist-info}
    [[ -n $info && -n $ver ]] || return 0
    if [[ $lib == nccl ]]; then mm=$ver; else mm=$(cut -d. -f1-2 <<<"$ver"); fi
    local dest="$CACHE/$lib-$mm"
    selected "$lib-$mm" || return 0
    [[ -L $dest/lib/$so && $(readlink "$dest/lib/$so") == "$file" ]] && return 0
    [[ -f $dest/.stamp ]] && return 0 # a fetched entry of that name wins
    mkdir -p "$dest/lib"
    ln -sfn "$file" "$dest/lib/$so"
    [[ $lib == cupti ]] && ln -sfn "$CUDA_HOME/include" "$dest/include"
    [[ $lib == nccl ]] && mkdir -p "$dest/include" && ln -sfn "$CUDA_HOME/include/nccl.h" "$dest/include/nccl.h"
    printf 'toolkit %s %s\n' "$file" "$ver" >"$dest/.toolkit"
    say "$lib-$mm: linked to the toolkit's $file"
}

while IFS='|' read -r name pkg ver sha members _; do
    selected "$name" || continue
    fetch_one "$name" "$pkg" "$ver" "$sha" "$members"
done <<<"$MATRIX"
rm -rf "$CACHE/.tmp"

link_toolkit cudart libcudart.so.13 nvidia_cuda_runtime
link_toolkit cupti libcupti.so.13 nvidia_cuda_cupti
link_toolkit nccl libnccl.so.2 nvidia_nccl_cu13

# MANIFEST.tsv: name, package==version, mode, file, apparent size, disk use
{
    printf 'name\tpackage\tmode\tfile\tbytes\tdisk_bytes\n'
    for d in "$CACHE"/*/; do
        d=${d%/}
        n=${d##*/}
        if [[ -f $d/.stamp ]]; then
            pv=$(sed -n 2p "$d/.stamp"); pv=${pv#package=}
            md=$(head -1 "$d/.stamp" | sed 's/.*mode=//')
        elif [[ -f $d/.toolkit ]]; then
            pv="toolkit==$(cut -d' ' -f3 "$d/.toolkit")"; md=toolkit
        else continue; fi
        for f in "$d"/lib/*; do
            printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$pv" "$md" "${f#"$CACHE"/}" \
                "$(stat -Lc %s "$f")" "$(($(stat -Lc %b "$f") * 512))"
        done
    done
} >"$CACHE/MANIFEST.tsv.new"
mv "$CACHE/MANIFEST.tsv.new" "$CACHE/MANIFEST.tsv"

if ((!QUIET)); then
    total=$(du -sb --exclude=.lock "$CACHE" | cut -f1)
    disk=$(du -sk "$CACHE" | cut -f1)
    say "cache $CACHE: $((total / 1048576)) MiB apparent, $((disk / 1024)) MiB on disk ($MODE)"
fi
