# Sourced by the VM scripts (tapflow-vm.sh, pci-vm.sh): the Debian kernel that
# ../shared/tools/rxe-vm caches, and an initramfs under $IR holding host files at their
# own paths.

CACHE=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rxe-vm}

# Sets DEB, KDIR and KVER to the cached kernel, filling the cache (and installing QEMU)
# with `rxe-vm --prepare` where it is missing; returns 1 when that cannot be done.
vm_kernel() {
    local tools=${DATAPLANE_SHARED_TOOLS:-} t
    for t in ../shared/tools /work/shared/tools; do
        [ -z "$tools" ] && [ -x "$t/rxe-vm" ] && tools=$t
    done
    if ! command -v qemu-system-x86_64 >/dev/null || ! ls "$CACHE"/debs/linux-image-*.deb >/dev/null 2>&1; then
        [ -n "$tools" ] || return 1
        "$tools/rxe-vm" --prepare >&2
    fi
    DEB=$(ls -t "$CACHE"/debs/linux-image-*.deb | head -1)
    KDIR=$(ls -td "$CACHE"/kernel/*/ | head -1)
    KVER=$(cat "$KDIR/kver")
}

# The common start of a VM script named NAME: the cached kernel (or a SKIPPED line and
# exit 0 without one), a work folder $W removed on exit unless KEEP is set, the kernel's
# files unpacked under $W/k, and the initramfs tree started at $IR.
vm_prepare() {
    local name=$1
    if ! vm_kernel; then
        echo "$name: SKIPPED: needs QEMU and a cached Debian kernel (run rxe-vm --prepare)" >&2
        exit 0
    fi
    W=$(mktemp -d "/tmp/$name.XXXXXX")
    trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
    dpkg -x "$DEB" "$W/k"
    IR=$W/ir
    vm_initrd_base
}

# Starts the initramfs tree at $IR: directories, merged /usr (so library links resolve to
# the files EAL loads) and busybox with its applets.
vm_initrd_base() {
    mkdir -p "$IR"/{bin,proc,sys,dev,tmp,mods,run,var/run,etc,usr/lib,usr/lib64,opt}
    ln -sfn usr/lib "$IR/lib"
    ln -sfn usr/lib64 "$IR/lib64"
    cp "$CACHE/busybox/busybox" "$IR/bin/"
    local a
    for a in $("$IR/bin/busybox" --list); do [ -e "$IR/bin/$a" ] || ln -s busybox "$IR/bin/$a"; done
}

# Copies a file to the same path in the VM, recreating symlinks on the way (DPDK's
# libraries link into the PMD directory; copies instead of links would load a bus twice).
copy_path() {
    local f=$1
    while [ -L "$f" ]; do
        mkdir -p "$IR$(dirname "$f")"
        ln -sfn "$(readlink "$f")" "$IR$f"
        local t
        t=$(readlink "$f")
        case $t in
            /*) f=$t ;;
            *) f=$(realpath -sm "$(dirname "$f")/$t") ;;
        esac
    done
    mkdir -p "$IR$(dirname "$f")"
    [ -e "$IR$f" ] || cp "$f" "$IR$f"
}

# Each file, the libraries ldd names for it, and libgcc_s (which Rust's unwinder loads).
copy_with_libs() {
    local f l
    for f in "$@"; do
        copy_path "$f"
        for l in $(ldd "$f" | grep -o '/[^ ]*'); do copy_path "$l"; done
    done
    copy_path /lib/x86_64-linux-gnu/libgcc_s.so.1
}

# Packs $IR into $W/initrd.
vm_pack_initrd() {
    (cd "$IR" && find . | "$IR/bin/busybox" cpio -o -H newc 2>/dev/null) > "$W/initrd"
}
