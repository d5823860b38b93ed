#!/usr/bin/env bash
# Installs the C library as `make install` does: libdataplane_c.so.VERSION with its soname
# link and the development link, dataplane.h, and dataplane.pc for pkg-config.
#   install-c.sh LIB PREFIX [LIBDIR] [INCLUDEDIR]   (DESTDIR in the environment stages it)
# LIB is a built libdataplane_c.so (its soname read from it); PREFIX an absolute path.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$1 prefix=$2
libdir=${3:-$prefix/lib} includedir=${4:-$prefix/include}
dest=${DESTDIR:-}
case $prefix in /*) ;; *) echo "install-c.sh: PREFIX must be an absolute path, not $prefix" >&2; exit 1 ;; esac
[ -f "$lib" ] || { echo "install-c.sh: $lib is missing (make install builds it)" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] || { echo "install-c.sh: $lib has no soname" >&2; exit 1; }
install -d "$dest$libdir/pkgconfig" "$dest$includedir"
install -m 0755 "$lib" "$dest$libdir/libdataplane_c.so.$version"
ln -sfn "libdataplane_c.so.$version" "$dest$libdir/$soname"
ln -sfn "$soname" "$dest$libdir/libdataplane_c.so"
install -m 0644 capi/include/dataplane.h "$dest$includedir/dataplane.h"
sed -e "s|@PREFIX@|$prefix|; s|@LIBDIR@|$libdir|; s|@INCLUDEDIR@|$includedir|; s|@VERSION@|$version|" \
  capi/dataplane.pc.in > "$dest$libdir/pkgconfig/dataplane.pc"
chmod 0644 "$dest$libdir/pkgconfig/dataplane.pc"
echo "installed libdataplane_c.so.$version (soname $soname), dataplane.h and dataplane.pc under $dest$prefix"
