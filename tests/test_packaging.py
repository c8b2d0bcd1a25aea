"""The Debian package and `make install` (packaging/): what is installed where,
and that the unit, the manual page and the tmpfiles entry pass the tools that
read them.

The package is built once per test session (`make deb` into a temporary
BUILD, 10 to 20 seconds) and extracted into a scratch root; nothing is
installed on this machine. These tests do not use NCCLPROBE_BUILD: the
package builds its own binary from the source tree.
"""

import gzip
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from lib.paths import REPO
from lib.skip import needs_tools

PACKAGING = REPO / "packaging"
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
# The highest systemd-analyze security exposure the unit may have (0 best, 10 worst).
MAX_EXPOSURE = 4.0


def deb_version():
    """('0.1.0-1', '0.1.0') from the first line of packaging/debian/changelog."""
    first = (PACKAGING / "debian" / "changelog").read_text().splitlines()[0]
    full = re.match(r"\S+ \(([^)]+)\)", first).group(1)
    return full, full.split("-")[0]


def clean_env():
    """Our environment without what an outer make (make test) exports: its
    MAKEFLAGS and command-line variables must not reach `make deb`."""
    env = dict(os.environ)
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "BUILD", "SAN"):
        env.pop(name, None)
    return env


def package_unavailable_reason():
    if os.environ.get("SAN") == "1":
        return "packaging is checked once, in the normal (not SAN=1) pass of make test"
    for tool in ("dpkg-buildpackage", "dh", "dpkg-checkbuilddeps", "dpkg-deb"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (tools/install-deps.sh installs debhelper and dpkg-dev)"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "kernel has no BTF (the build generates vmlinux.h from it)"
    proc = subprocess.run(["dpkg-checkbuilddeps", "packaging/debian/control"], cwd=REPO,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return "build dependencies missing: " + proc.stderr.strip()
    return None


class Package:
    def __init__(self, deb, root, seconds):
        self.deb = deb          # the .deb
        self.root = root        # extracted with dpkg -x
        self.seconds = seconds  # how long make deb took

    def path(self, installed):
        """The extracted copy of an installed path ("/usr/bin/ncclprobe")."""
        return self.root / installed.lstrip("/")


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    reason = package_unavailable_reason()
    if reason:
        pytest.skip(reason)
    build = tmp_path_factory.mktemp("pkgbuild")
    start = time.monotonic()
    proc = subprocess.run(["make", f"BUILD={build}", "deb"], cwd=REPO, capture_output=True,
                          text=True, timeout=900, env=clean_env())
    seconds = time.monotonic() - start
    assert proc.returncode == 0, "make deb failed:\n" + (proc.stdout + proc.stderr)[-6000:]
    found = re.search(r"^make deb: (\S+\.deb)$", proc.stdout, re.M)
    assert found, "make deb did not print the package's path:\n" + proc.stdout[-2000:]
    deb = Path(found.group(1))
    full, _ = deb_version()
    assert deb.name == f"ncclprobe_{full}_amd64.deb" and deb.parent == build / "deb"
    root = tmp_path_factory.mktemp("pkgroot")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    print(f"make deb: {seconds:.1f} s")
    return Package(deb, root, seconds)


def expected_files():
    """Every regular file the package installs, with its mode."""
    files = {
        "/usr/bin/ncclprobe": 0o755,
        "/lib/systemd/system/ncclprobe.service": 0o644,
        "/etc/ncclprobe/ncclprobe.conf": 0o644,
        "/usr/lib/tmpfiles.d/ncclprobe.conf": 0o644,
        "/usr/share/man/man8/ncclprobe.8.gz": 0o644,
        "/usr/share/doc/ncclprobe/README.md": 0o644,
        "/usr/share/doc/ncclprobe/copyright": 0o644,
        "/usr/share/doc/ncclprobe/changelog.Debian.gz": 0o644,
    }
    for doc in (REPO / "docs").glob("*.md"):
        files[f"/usr/share/doc/ncclprobe/docs/{doc.name}"] = 0o644
    # The CUPTI injection library is built where the toolkit's headers are.
    if (CUDA_HOME / "include" / "cupti.h").exists():
        files["/usr/lib/ncclprobe/libncclprobe_cupti.so"] = 0o644
    return files


def tree_files(root):
    """{"/path": mode} of the regular files under root."""
    out = {}
    for p in root.rglob("*"):
        st = p.lstat()
        assert not stat.S_ISLNK(st.st_mode), f"unexpected symlink {p}"
        if stat.S_ISREG(st.st_mode):
            out["/" + str(p.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return out


def test_package_files(package):
    listing = subprocess.run(["dpkg-deb", "-c", str(package.deb)], capture_output=True,
                             text=True, check=True).stdout
    listed = {}
    for line in listing.splitlines():
        mode, owner, _size, _date, _time, name = line.split(None, 5)
        assert owner == "root/root", line
        if mode.startswith("-"):
            listed[name[1:]] = mode
    assert sorted(listed) == sorted(expected_files())
    assert tree_files(package.root) == expected_files()
    assert listed["/usr/bin/ncclprobe"] == "-rwxr-xr-x"


def test_package_control(package, tmp_path):
    subprocess.run(["dpkg-deb", "-e", str(package.deb), str(tmp_path / "DEBIAN")], check=True)
    conffiles = (tmp_path / "DEBIAN" / "conffiles").read_text().split()
    assert conffiles == ["/etc/ncclprobe/ncclprobe.conf"]
    fields = subprocess.run(["dpkg-deb", "-f", str(package.deb), "Package", "Version",
                             "Architecture", "Depends"], capture_output=True, text=True,
                            check=True).stdout
    assert "Package: ncclprobe" in fields
    assert f"Version: {deb_version()[0]}" in fields
    assert "Architecture: amd64" in fields
    # ${shlibs:Depends} was filled in from the binary's libraries.
    assert re.search(r"Depends:.*libbpf1.*", fields) and "libdw1" in fields, fields
    # The unit is enabled (and started) by the maintainer scripts; tmpfiles created.
    postinst = (tmp_path / "DEBIAN" / "postinst").read_text()
    assert "deb-systemd-helper enable 'ncclprobe.service'" in postinst
    assert "systemd-tmpfiles" in postinst and "ncclprobe.conf" in postinst


def test_package_files_are_the_sources(package):
    """The text files are packaging/'s, unchanged (the unit keeps /usr/bin)."""
    assert package.path("/etc/ncclprobe/ncclprobe.conf").read_bytes() == \
        (PACKAGING / "ncclprobe.conf").read_bytes()
    assert package.path("/lib/systemd/system/ncclprobe.service").read_bytes() == \
        (PACKAGING / "ncclprobe.service").read_bytes()
    assert package.path("/usr/lib/tmpfiles.d/ncclprobe.conf").read_bytes() == \
        (PACKAGING / "tmpfiles.conf").read_bytes()
    assert gzip.decompress(package.path("/usr/share/man/man8/ncclprobe.8.gz").read_bytes()) \
        == (PACKAGING / "ncclprobe.8").read_bytes()


def test_packaged_binary_runs(package):
    proc = subprocess.run([str(package.path("/usr/bin/ncclprobe")), "--version"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ncclprobe {deb_version()[1]}"
    lib = package.path("/usr/lib/ncclprobe/libncclprobe_cupti.so")
    if lib.exists():
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                                 text=True, check=True).stdout
        assert re.search(r"\bInitializeInjection\b", symbols), symbols


UNIT = "/lib/systemd/system/ncclprobe.service"


def unit_settings(text):
    """{key: [values]} of the unit's [Service] section."""
    out, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif line and not line.startswith("#") and section == "[Service]":
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_unit_settings(package):
    """The settings the daemon depends on, which "more hardening" would break."""
    s = unit_settings(package.path(UNIT).read_text())
    assert s["ExecStart"] == ["/usr/bin/ncclprobe daemon"]
    assert s["CapabilityBoundingSet"] == [
        "CAP_BPF CAP_PERFMON CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_SYS_RESOURCE"]
    assert s["StateDirectory"] == ["ncclprobe"] and s["StateDirectoryMode"] == ["0700"]
    assert s["RuntimeDirectory"] == ["ncclprobe"] and s["RuntimeDirectoryMode"] == ["0755"]
    assert s["ProtectHome"] == ["read-only"]
    assert s["LimitMEMLOCK"] == ["infinity"]
    # The daemon must see every process and the non-process files of /proc.
    assert "ProtectProc" not in s and "ProcSubset" not in s
    assert "User" not in s and "DynamicUser" not in s


@needs_tools("systemd-analyze", "man")
def test_unit_verifies(package, tmp_path):
    """systemd-analyze verify checks that ExecStart's program exists on this
    machine, where the package is not installed: the extracted unit is
    verified with its ExecStart (and nothing else) pointing at the extracted
    binary, and man finds ncclprobe(8) (Documentation=) in the scratch root.
    A warning (unknown key, bad value) fails the test as an error would."""
    unit = tmp_path / "ncclprobe.service"
    text = package.path(UNIT).read_text()
    assert text.count("/usr/bin/ncclprobe") == 1
    unit.write_text(text.replace("/usr/bin/ncclprobe", str(package.path("/usr/bin/ncclprobe"))))
    env = {**os.environ, "MANPATH": str(package.path("/usr/share/man"))}
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@needs_tools("systemd-analyze")
def test_unit_security_exposure(package):
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager",
                           str(package.path(UNIT))], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"Overall exposure level for ncclprobe\.service: ([0-9.]+)", proc.stdout)
    assert found, proc.stdout[-2000:]
    exposure = float(found.group(1))
    print(f"systemd-analyze security: exposure {exposure}")
    assert exposure < MAX_EXPOSURE, proc.stdout


def help_options(binary, command):
    proc = subprocess.run([str(binary), command, "--help"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, f"{command} --help: {proc.stderr}"
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", proc.stdout))
    assert options, f"{command} --help lists no options"
    return options


@needs_tools("man", "groff")
def test_man_page(package, tmp_path):
    page = package.path("/usr/share/man/man8/ncclprobe.8.gz")
    env = {**os.environ, "LC_ALL": "C.UTF-8", "MANROFFSEQ": "", "MANWIDTH": "80"}
    proc = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", str(page)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    text = proc.stdout
    source = tmp_path / "ncclprobe.8"
    source.write_bytes(gzip.decompress(page.read_bytes()))
    groff = subprocess.run(["groff", "-man", "-ww", "-z", str(source)], capture_output=True,
                           text=True, timeout=60)
    assert groff.returncode == 0 and groff.stderr == "", groff.stderr

    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "RECORD", "MERGE", "REPORT", "DAEMON",
                    "CONFIGURATION", "FILES", "ENVIRONMENT", "EXIT STATUS", "EXAMPLES",
                    "SEE ALSO"):
        assert re.search(rf"^{section}$", text, re.M), f"no {section} section"
    for synopsis in ("ncclprobe record", "ncclprobe --pid", "ncclprobe merge",
                     "ncclprobe report", "ncclprobe daemon", "ncclprobe ctl"):
        assert synopsis in text
    # Every configuration key ("# key = default" in the shipped file).
    keys = re.findall(r"^# ([a-z_]+) =", (PACKAGING / "ncclprobe.conf").read_text(), re.M)
    assert len(keys) >= 25
    for key in keys:
        assert re.search(rf"^ {{7}}{key}\b|^ {{7}}\w+, {key}\b", text, re.M), \
            f"configuration key {key} is not in CONFIGURATION"
    # Every option the packaged binary's --help lists.
    binary = package.path("/usr/bin/ncclprobe")
    for command in ("record", "merge", "report", "daemon", "ctl", "flamegraph"):
        options = help_options(binary, command)
        for option in sorted(options):
            assert option in text, f"{command} {option} is not in the manual page"
    for name in ("CUDA_INJECTION64_PATH", "NCCLPROBE_CUPTI_SOCKET",
                 "/usr/lib/ncclprobe/libncclprobe_cupti.so", "SIGHUP", "SIGTERM"):
        assert name in text


@needs_tools("systemd-tmpfiles")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfiles chowns to root)")
def test_tmpfiles_creates_directories(package, tmp_path):
    root = tmp_path / "root"
    conf = root / "usr/lib/tmpfiles.d/ncclprobe.conf"
    conf.parent.mkdir(parents=True)
    shutil.copy(package.path("/usr/lib/tmpfiles.d/ncclprobe.conf"), conf)
    proc = subprocess.run(["systemd-tmpfiles", f"--root={root}", "--create", "ncclprobe.conf"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    for path, mode in (("run/ncclprobe", 0o755), ("var/lib/ncclprobe", 0o700)):
        st = (root / path).stat()
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == mode, path
        assert st.st_uid == 0 and st.st_gid == 0


def make_install(build, destdir, *args):
    proc = subprocess.run(["make", f"-j{os.cpu_count() or 1}", f"BUILD={build}", "install",
                           f"DESTDIR={destdir}", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=900, env=clean_env())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc


def test_make_install_matches_package(package, tmp_path):
    build = tmp_path / "build"
    stage = tmp_path / "stage"
    make_install(build, stage, "PREFIX=/usr", "SYSTEMD_UNIT_DIR=/lib/systemd/system")
    installed = tree_files(stage)
    packaged = expected_files()
    # What dh_installdocs adds.
    del packaged["/usr/share/doc/ncclprobe/copyright"]
    del packaged["/usr/share/doc/ncclprobe/changelog.Debian.gz"]
    assert installed == packaged
    for path in installed:
        if path.startswith(("/usr/bin/", "/usr/lib/ncclprobe/")):
            continue  # the package's are stripped
        assert (stage / path.lstrip("/")).read_bytes() == package.path(path).read_bytes(), path

    # The default prefix, a unit asked for elsewhere: ExecStart follows the binary.
    local = tmp_path / "local"
    make_install(build, local, "SYSTEMD_UNIT_DIR=/etc/systemd/system")
    files = tree_files(local)
    assert "/usr/local/bin/ncclprobe" in files
    assert "/usr/local/lib/tmpfiles.d/ncclprobe.conf" in files
    assert "/usr/local/share/man/man8/ncclprobe.8.gz" in files
    assert "/etc/ncclprobe/ncclprobe.conf" in files
    unit = unit_settings((local / "etc/systemd/system/ncclprobe.service").read_text())
    assert unit["ExecStart"] == ["/usr/local/bin/ncclprobe daemon"]

    # No unit unless asked; an administrator's configuration is kept.
    conf = local / "etc/ncclprobe/ncclprobe.conf"
    conf.write_text("log_level = debug\n")
    (local / "etc/systemd/system/ncclprobe.service").unlink()
    make_install(build, local)
    assert conf.read_text() == "log_level = debug\n"
    assert not (local / "etc/systemd/system/ncclprobe.service").exists()
    assert not any("systemd" in p for p in tree_files(local))
