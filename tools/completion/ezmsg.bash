# bash completion for ezmsg (installed as share/bash-completion/completions/ezmsg).
# Completes commands, each command's options, and topic names (asked from the graph server in
# effect, with a 1 s timeout, by `ezmsg list --names`).

_ezmsg_topics() {
  local addr=() i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
    -a | --address) addr=(--address "${COMP_WORDS[i + 1]}") ;;
    esac
  done
  ezmsg list --names --timeout 1 "${addr[@]}" 2>/dev/null
}

_ezmsg() {
  local cur prev cmd opts
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD - 1]}
  local commands="serve start shutdown connect disconnect graphviz mermaid sync pause resume pub
    sub profile list info hz bw dashboard perf"
  if ((COMP_CWORD == 1)); then
    mapfile -t COMPREPLY < <(compgen -W "$commands --help --version" -- "$cur")
    return
  fi
  cmd=${COMP_WORDS[1]}
  opts="--address --help"
  case "$cmd" in
  serve) opts="$opts --max-clients --metrics" ;;
  start) opts="$opts --timeout --max-clients" ;;
  pub) opts="$opts --timeout --message --size --count --rate --num-buffers --force-tcp
      --wait-subscribers --host" ;;
  sub) opts="$opts --timeout --count --handle --ready-file" ;;
  profile) opts="$opts --timeout --window --format --watch" ;;
  list | info) opts="$opts --timeout --json" ;;
  hz | bw) opts="$opts --timeout --json --interval --window --count" ;;
  dashboard) opts="$opts --timeout --listen --interval --window" ;;
  perf) opts="$opts --timeout --config --transport --size --count" ;;
  *) opts="$opts --timeout" ;;
  esac
  case "$prev" in
  --format) mapfile -t COMPREPLY < <(compgen -W "json table" -- "$cur"); return ;;
  --ready-file) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
  -a | --address | --listen | --metrics | --timeout | --window | --watch | --interval | --count | \
    --rate | --size | --message | --num-buffers | --max-clients | --handle | --host | \
    --wait-subscribers) return ;;
  esac
  if [[ "$cur" == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
    return
  fi
  case "$cmd" in
  info | hz | bw | pub | sub | connect | disconnect)
    mapfile -t COMPREPLY < <(compgen -W "$(_ezmsg_topics)" -- "$cur") ;;
  esac
}
complete -F _ezmsg ezmsg
