# packaging.mk - make install, make deb (included at the end of the top-level Makefile).
#
#   make install [DESTDIR=STAGE] [PREFIX=/usr/local] [SYSTEMD_UNIT_DIR=/lib/systemd/system]
#       the binary, the CUPTI injection library (when the toolkit built it),
#       /etc/ncclprobe/ncclprobe.conf, the manual page, tmpfiles.d entry and
#       docs; the systemd unit only when SYSTEMD_UNIT_DIR is given.
#   make deb
#       $(BUILD)/deb/ncclprobe_VERSION_amd64.deb, built with dpkg-buildpackage
#       from a copy of the source tree (packaging/README.md).

PREFIX  ?= /usr/local
DESTDIR ?=
SYSCONFDIR ?= /etc
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
MANDIR  ?= $(PREFIX)/share/man
DOCDIR  ?= $(PREFIX)/share/doc/ncclprobe
# systemd-tmpfiles reads /usr/lib/tmpfiles.d and /usr/local/lib/tmpfiles.d.
TMPFILESDIR ?= $(LIBDIR)/tmpfiles.d
# Empty: no unit installed (a unit outside the package manager's control is
# rarely wanted). The package uses /lib/systemd/system.
SYSTEMD_UNIT_DIR ?=

# 0.1.0-1 from the first line of packaging/debian/changelog; 0.1.0 without the revision.
PKG_DEBVERSION := $(shell sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' packaging/debian/changelog 2>/dev/null)
PKG_VERSION    := $(firstword $(subst -, ,$(PKG_DEBVERSION)))
DEB_DIR     := $(BUILD)/deb
DEB_SRC     := $(DEB_DIR)/ncclprobe-$(PKG_VERSION)

.PHONY: install deb pkg-build

# What is installed: the binary, and the CUPTI library where the toolkit's
# headers are (CUPTI_LIB, top-level Makefile).
pkg-build: $(BUILD)/ncclprobe $(CUPTI_LIB)

install: pkg-build
	install -D -m 0755 $(BUILD)/ncclprobe $(DESTDIR)$(BINDIR)/ncclprobe
	if [ -f $(BUILD)/libncclprobe_cupti.so ]; then \
		install -D -m 0644 $(BUILD)/libncclprobe_cupti.so \
			$(DESTDIR)$(LIBDIR)/ncclprobe/libncclprobe_cupti.so; \
	fi
# The configuration: an administrator's edited file is never overwritten.
	if [ -e $(DESTDIR)$(SYSCONFDIR)/ncclprobe/ncclprobe.conf ]; then \
		echo "install: keeping $(DESTDIR)$(SYSCONFDIR)/ncclprobe/ncclprobe.conf"; \
	else \
		install -D -m 0644 packaging/ncclprobe.conf $(DESTDIR)$(SYSCONFDIR)/ncclprobe/ncclprobe.conf; \
	fi
	install -d -m 0755 $(DESTDIR)$(MANDIR)/man8
	gzip -9 -n -c packaging/ncclprobe.8 > $(DESTDIR)$(MANDIR)/man8/ncclprobe.8.gz
	chmod 0644 $(DESTDIR)$(MANDIR)/man8/ncclprobe.8.gz
	install -D -m 0644 packaging/tmpfiles.conf $(DESTDIR)$(TMPFILESDIR)/ncclprobe.conf
	install -D -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -d -m 0755 $(DESTDIR)$(DOCDIR)/docs
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
# The unit names /usr/bin/ncclprobe: rewritten for another BINDIR.
	if [ -n "$(SYSTEMD_UNIT_DIR)" ]; then \
		install -d -m 0755 $(DESTDIR)$(SYSTEMD_UNIT_DIR) && \
		sed 's|/usr/bin/ncclprobe|$(BINDIR)/ncclprobe|g' packaging/ncclprobe.service \
			> $(DESTDIR)$(SYSTEMD_UNIT_DIR)/ncclprobe.service && \
		chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/ncclprobe.service; \
	fi

# The package is built from a copy of the source tree: the files git tracks
# plus the untracked ones it does not ignore (so no build/), or, outside a git
# checkout, everything but build/ and .git. packaging/debian becomes debian/.
# The make variables of this run (BUILD=..., MAKEFLAGS) must not reach the
# package's own make: debian/rules sets its own.
deb:
	@command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null || \
		{ echo "make deb: needs dpkg-buildpackage and debhelper (tools/install-deps.sh)" >&2; exit 1; }
	rm -rf $(DEB_SRC)
	mkdir -p $(DEB_SRC)
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		git ls-files -z --cached --others --exclude-standard -- . ':!:build' | \
			tar --null -T - --ignore-failed-read -cf - | tar -xf - -C $(DEB_SRC); \
	else \
		tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C $(DEB_SRC); \
	fi
	cp -a packaging/debian $(DEB_SRC)/debian
	cd $(DEB_SRC) && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES -u BUILD -u SAN \
		dpkg-buildpackage -b -us -uc -jauto
	@deb=$(DEB_DIR)/ncclprobe_$(PKG_DEBVERSION)_$$(dpkg --print-architecture).deb; \
		if [ -f $$deb ]; then echo "make deb: $$deb"; else echo "make deb: no $$deb" >&2; exit 1; fi
