"""The bash side of a docker channel (see docker_channel.py for what it does and the protocol it speaks): the server
that one long-lived exec runs, and the launcher it starts ahead of each command. Both are sent on the exec's stdin."""

SERVER = r"""set +o posix; LC_ALL=C F=$1 G=$2; shift 2; __oc_dirs=("$@")
B="IFS= read -r -N ${#__oc_launch} __oc_s && eval \"\$__oc_s\""
__oc_env=(); __oc_keep=()
while IFS= read -r -d '' v; do
  __oc_env+=("$v")
  case $v in PWD=* | OLDPWD=* | LC_ALL=*) __oc_keep+=("$v") ;; esac
done </proc/$$/environ
S=$(command -v setsid)
exec {OUT}>&1
say() { printf '\036%s %s\036\n' "$n" "$1" >&"$OUT"; }
prepare() {
  relay=
  { { [ -p "$F" ] && [ -p "$F.in" ]; } || { mkdir -p -m 1777 "${__oc_dirs[@]}" && rm -f -- "$F" "$F.in" &&
    mkfifo -m 600 -- "$F" "$F.in"; }; } 2>/dev/null || return
  exec {rw}<>"$F"; exec {r}<"$F" {w}>"$F"; exec {rw}<&-; exec {q}<>"$F.in"
  exec {fin}< <(echo "$BASHPID"; exec cat <&"$r" 4>&1 >&"$OUT" {OUT}>&- {r}<&- {w}>&- {q}<&- 2>/dev/null)
  (trap - INT QUIT; unset OLDPWD PWD SHLVL
   for __oc_v in "${__oc_env[@]}"; do export "$__oc_v"; done 2>/dev/null
   exec "$S" bash --posix -c "$B" oc-repl-launch "${__oc_keep[@]}") \
    <"$F.in" >&"$w" 2>&1 {w}>&- {r}<&- {q}<&- {fin}<&- {OUT}>&- &
  L=$! relay=-; exec {w}>&-; printf %s "$__oc_launch" >&"$q"
  __oc_pid=; read -r __oc_st </proc/$L/stat && __oc_st=(${__oc_st##*) }) && __oc_pid="$L ${__oc_st[19]}"
}
alive() {
  [ "$relay" = - ] && { read -r -u "$fin" relay || relay=; }
  [ -n "$relay" ] && [ -n "$__oc_pid" ] && ! read -r -t 0 -u "$fin"
}
ready() {
  alive && return
  [ -n "$relay" ] && { kill -KILL "$L" "$relay" 2>/dev/null; exec {r}<&- {q}<&- {fin}<&-; }
  rm -f -- "$F" "$F.in"; prepare && alive
}
prepare
while IFS= read -r -N 8 v && IFS= read -r -N "$((10#$v))" v; do
  __oc_head=($v); n=${__oc_head[0]} blob=${__oc_head[1]} ok=$S t=0
  for l in "${__oc_head[@]:2}"; do t=$((t + l)); done
  IFS= read -r -N "$t" v || break
  __oc_vals=(); o=0; for l in "${__oc_head[@]:2}"; do __oc_vals+=("${v:o:l}"); o=$((o + l)); done
  cwd=${__oc_vals[0]} path=${__oc_vals[3]}
  if [ "$blob" -gt 0 ]; then
    [ -d "${path%/*}" ] || mkdir -p -m 1777 "${__oc_dirs[@]}" 2>/dev/null
    head -c "$blob" | tee -- "$path" >/dev/null 2>&1 || ok=
  fi
  IFS= read -r -N 1 l && [ "$l" = . ] || break
  if [ -n "$ok" ] && cd -P -- "$cwd" 2>/dev/null && ready; then
    say "ok $$ $__oc_pid"
    l="${__oc_head[*]:2}"; printf '%08d%s%s' "${#l}" "$l" "$v" >&"$q"; exec {q}<&-
    { echo "$__oc_pid" >"${__oc_vals[2]}"; } 2>/dev/null ||
      { mkdir -p -m 1777 "${__oc_dirs[@]}" && echo "$__oc_pid" >"${__oc_vals[2]}"; } 2>/dev/null
    wait "$L"; st=$?
    IFS= read -r -t "$G" -u "$fin" _
    if [ $? -gt 128 ]; then
      kill -KILL "$relay" 2>/dev/null; IFS= read -r -u "$fin" _
      cat <&"$r" >/dev/null 2>&1 {r}<&- {fin}<&- {OUT}>&- &
      rm -f -- "$F"
    fi
    exec {r}<&- {fin}<&-
    say "end $st"
    prepare
  else say "fallback $$"; fi
done
"""

# The shell that runs a command, started in advance by the server (its fork and setsid are then behind the caller):
# it reads its script, then (on stdin from the server) the request's sizes and strings without the nonce and the blob,
# and becomes the command's `bash -c`. Its pid and start time (the command's, as exec keeps both) the server read when
# it started it, and writes to the pid file while this shell goes on. Arguments: whichever of PWD, OLDPWD and LC_ALL
# the daemon's environment held, exported again over what this shell's start and `cd` made of them. SHLVL is left
# alone: this shell raised it by one, and `exec` lowers it by one again.
LAUNCH = r"""set +o posix; LC_ALL=C
IFS= read -r -N 8 __oc_v && IFS= read -r -N "$((10#$__oc_v))" __oc_v || exit
__oc_h=($__oc_v) __oc_t=0; for __oc_l in "${__oc_h[@]}"; do __oc_t=$((__oc_t + __oc_l)); done
IFS= read -r -N "$__oc_t" __oc_v || exit
__oc_x=() __oc_o=0
for __oc_l in "${__oc_h[@]}"; do __oc_x+=("${__oc_v:__oc_o:__oc_l}"); __oc_o=$((__oc_o + __oc_l)); done
cd -P -- "${__oc_x[0]}" || exit
unset OLDPWD PWD LC_ALL
for __oc_v in "$@" "${__oc_x[@]:4}"; do export "$__oc_v"; done 2>/dev/null
exec bash -c "${__oc_x[1]}" </dev/null
"""
# The scripts come on stdin, so that the server's and the launchers' command lines stay short in the `ps` a model may
# run; they are ASCII, so characters and bytes are one.
BOOT = f'IFS= read -r -N {len(SERVER)} __oc_s && IFS= read -r -N {len(LAUNCH)} __oc_launch && eval "$__oc_s"'
