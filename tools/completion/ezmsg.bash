# bash completion for ezmsg (installed as share/bash-completion/completions/ezmsg).
# Completes commands, each command's options (from its --help), and topic names (asked from the graph server in
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
  # A command's options as its own --help lists them (so they never drift from the program).
  opts=$(ezmsg "$cmd" --help 2>/dev/null | grep -oE -- '--[a-z][a-z-]*' | sort -u)
  case "$prev" in
  --format) mapfile -t COMPREPLY < <(compgen -W "json table" -- "$cur"); return ;;
  --dialect) mapfile -t COMPREPLY < <(compgen -W "released profiling auto" -- "$cur"); return ;;
  --config) mapfile -t COMPREPLY < <(compgen -W "fanout fanin relay pingpong all" -- "$cur"); return ;;
  --transport) mapfile -t COMPREPLY < <(compgen -W "local shm tcp all" -- "$cur"); return ;;
  --ready-file) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
  -a | --address | --listen | --metrics | --timeout | --window | --watch | --interval | --count | \
    --rate | --size | --message | --num-buffers | --max-clients | --handle | --host | \
    --wait-subscribers | --leaky | --hold | --clients | --duration | --warmup | --buf-size) return ;;
  esac
  if [[ "$cur" == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
    return
  fi
  case "$cmd" in
  info | hz | bw | pub | sub | connect | disconnect | profile)
    mapfile -t COMPREPLY < <(compgen -W "$(_ezmsg_topics)" -- "$cur") ;;
  esac
}
complete -F _ezmsg ezmsg
