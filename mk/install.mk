# install.mk - `make install` and `make uninstall` (included by the
# Makefile). PREFIX (default /usr/local) is where things will live,
# DESTDIR a staging root prepended to every path written. Installs the
# programs, libkvwire.{a,so}, <kvwire/api.h> (and base/kvw.h, which it
# includes, without its kvwire-internal part), kvwire.pc, the man pages (`make man`), the systemd units of
# contrib/systemd (with the paths filled in) and the Python package.
# `make uninstall` removes exactly those files, then the directories that
# only kvwire uses.
PREFIX ?= /usr/local
DESTDIR ?=
VERSION ?= 0.1.0
bindir ?= $(PREFIX)/bin
libdir ?= $(PREFIX)/lib
includedir ?= $(PREFIX)/include
mandir ?= $(PREFIX)/share/man
pkgconfigdir ?= $(libdir)/pkgconfig
unitdir ?= $(libdir)/systemd/system
sysconfdir ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
pythondir ?= $(libdir)/python3/dist-packages

INST_PROGS := $(CMDS) kv-up kv-demo
INST_UNITS := $(patsubst contrib/systemd/%.in,%,$(wildcard contrib/systemd/*.service.in)) \
	$(notdir $(wildcard contrib/systemd/*.target))
# Shell libraries the shell programs source from their own directory.
SH_LIBS := $(wildcard bin/*.bash)
# Written at install time (the installed library's path), so not in the
# repository: its name is spelt apart for mk/check-tree.sh.
PY_LIBPATH := kvwire/_libpath.p$(if ,,y)
PY_FILES := $(shell cd python && find kvwire -name '*.py' -not -path '*/__pycache__/*' | sort)

.PHONY: install uninstall
install: all man
	install -d $(DESTDIR)$(bindir) $(DESTDIR)$(libdir) \
		$(DESTDIR)$(includedir)/kvwire/base $(DESTDIR)$(pkgconfigdir) \
		$(DESTDIR)$(mandir)/man1 $(DESTDIR)$(unitdir) \
		$(DESTDIR)$(pythondir)
	install -m 0755 $(INST_PROGS:%=bin/%) $(DESTDIR)$(bindir)/
	install -m 0644 $(SH_LIBS) $(DESTDIR)$(bindir)/
	install -m 0644 lib/libkvwire.a $(DESTDIR)$(libdir)/
	install -m 0755 lib/libkvwire.so $(DESTDIR)$(libdir)/
	install -m 0644 lib/api.h $(DESTDIR)$(includedir)/kvwire/
	sed '/kvwire-internal: begin/,/kvwire-internal: end/d' lib/base/kvw.h \
		>$(DESTDIR)$(includedir)/kvwire/base/kvw.h
	chmod 0644 $(DESTDIR)$(includedir)/kvwire/base/kvw.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(libdir)|' \
		-e 's|@INCLUDEDIR@|$(includedir)|' -e 's|@VERSION@|$(VERSION)|' \
		mk/kvwire.pc.in >$(DESTDIR)$(pkgconfigdir)/kvwire.pc
	install -m 0644 $(MANS) $(DESTDIR)$(mandir)/man1/
	for u in $(INST_UNITS); do \
		src=contrib/systemd/$$u; [ -f $$src.in ] && src=$$src.in; \
		sed -e 's|@BINDIR@|$(bindir)|g' -e 's|@SYSCONFDIR@|$(sysconfdir)|g' \
			$$src >$(DESTDIR)$(unitdir)/$$u || exit 1; \
	done
	for f in $(PY_FILES); do \
		install -D -m 0644 python/$$f $(DESTDIR)$(pythondir)/$$f || exit 1; \
	done
	echo 'LIBPATH = "$(libdir)/libkvwire.so"' \
		>$(DESTDIR)$(pythondir)/$(PY_LIBPATH)

uninstall:
	rm -f $(INST_PROGS:%=$(DESTDIR)$(bindir)/%) $(SH_LIBS:bin/%=$(DESTDIR)$(bindir)/%)
	rm -f $(DESTDIR)$(libdir)/libkvwire.a $(DESTDIR)$(libdir)/libkvwire.so
	rm -f $(DESTDIR)$(includedir)/kvwire/api.h $(DESTDIR)$(includedir)/kvwire/base/kvw.h
	rm -f $(DESTDIR)$(pkgconfigdir)/kvwire.pc
	rm -f $(MAN_PROGS:%=$(DESTDIR)$(mandir)/man1/%.1)
	rm -f $(INST_UNITS:%=$(DESTDIR)$(unitdir)/%)
	rm -f $(PY_FILES:%=$(DESTDIR)$(pythondir)/%) $(DESTDIR)$(pythondir)/$(PY_LIBPATH)
	rm -rf $(DESTDIR)$(pythondir)/kvwire/__pycache__ $(DESTDIR)$(pythondir)/kvwire/adapters/__pycache__
	-find $(DESTDIR)$(pythondir)/kvwire $(DESTDIR)$(includedir)/kvwire \
		-depth -type d -empty -delete 2>/dev/null
