#!/usr/bin/env bash
# Runs the code blocks of the front page and the book (README.md, docs/*.md) by their
# language, as docs/introduction.md lists: sh, c, python, yaml. Rust blocks are the
# library's doctests (`cargo test`); `text` and blocks marked no_run or ignore are shown
# only. Needs the release build, libdataplane_c and the Python venv of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY=${PY:-$root/target/pyenv/bin/python}
work=$(mktemp -d /tmp/book-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PATH="$root/target/release:$PATH"
[ -x target/release/dataplane ] || { echo "book-check: build first (target/release/dataplane)" >&2; exit 1; }

# Every chapter is a doctest of the library, so its Rust blocks run too.
for f in README.md docs/*.md; do
    case $f in docs/SUMMARY.md) continue ;; esac
    grep -q "include_str!(\"../../$f\")" dataplane/src/lib.rs ||
        { echo "book-check: $f is not in dataplane/src/lib.rs's book module (its Rust blocks would not run)" >&2; exit 1; }
done
# Every chapter file is in the book's table of contents.
for f in docs/*.md; do
    case $f in docs/SUMMARY.md) continue ;; esac
    grep -q "($(basename "$f"))" docs/SUMMARY.md || { echo "book-check: $f is not in docs/SUMMARY.md" >&2; exit 1; }
done

# Split every file into its blocks: work/N.LANG, with a line naming where each came from.
python3 - "$work" README.md docs/*.md <<'PY'
import sys, os
work, files = sys.argv[1], sys.argv[2:]
n = 0
index = open(os.path.join(work, "index"), "w")
for f in files:
    block, lang, start = None, None, 0
    for no, line in enumerate(open(f), 1):
        if block is None and line.startswith("```"):
            info = line[3:].strip()
            parts = [p.strip() for p in info.split(",") if p.strip()]
            if not parts:
                sys.exit(f"{f}:{no}: a code block without a language (text, sh, rust, ...)")
            lang, flags, block, start = parts[0], parts[1:], [], no
        elif block is not None and line.startswith("```"):
            skip = "no_run" in flags or "ignore" in flags
            if lang in ("sh", "c", "python", "yaml") and not skip:
                n += 1
                open(os.path.join(work, f"{n}.{lang}"), "w").write("".join(block))
                index.write(f"{n}.{lang} {f}:{start}\n")
            block = None
        elif block is not None:
            block.append(line)
    if block is not None:
        sys.exit(f"{f}:{start}: a code block that is never closed")
PY

ran=0
while read -r file where; do
    lang=${file#*.}
    export BOOK_TMP="$work/tmp.$file"
    mkdir -p "$BOOK_TMP"
    log="$work/$file.log"
    case $lang in
        sh) cmd=(bash -euo pipefail "$work/$file") ;;
        python) cmd=("$PY" "$work/$file") ;;
        c)
            # Against the library as `make install` lays it out (soname links, pkg-config).
            [ -e "$work/c/lib/pkgconfig/dataplane.pc" ] ||
                ./scripts/install-c.sh target/release/libdataplane_c.so "$work/c" >/dev/null
            read -ra c_flags <<< "$(PKG_CONFIG_PATH=$work/c/lib/pkgconfig pkg-config --cflags --libs dataplane)"
            cc -O2 -Wall -Wextra -Werror -x c "$work/$file" "${c_flags[@]}" \
                -Wl,-rpath,"$work/c/lib" -o "$work/$file.bin" >"$log" 2>&1 ||
                { cat "$log" >&2; echo "book-check: $where: the C block does not compile" >&2; exit 1; }
            cmd=("$work/$file.bin") ;;
        yaml) cmd=(dataplane validate "$work/$file") ;;
    esac
    if ! "${cmd[@]}" >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "book-check: $where: the $lang block failed" >&2
        exit 1
    fi
    ran=$((ran + 1))
    echo "book-check: $where ($lang) ok"
done <"$work/index"
[ "$ran" -gt 0 ] || { echo "book-check: no block ran" >&2; exit 1; }
echo "book-check: $ran blocks ran"
