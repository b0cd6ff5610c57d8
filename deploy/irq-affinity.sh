#!/usr/bin/env bash
# irq-affinity.sh: pin NIC queue interrupts to corekv's shard CPUs.
#
# corekv runs one pinned shard per CPU. Left alone, NIC interrupts land
# wherever irqbalance (or the driver default) puts them, often on CPU 0 or on
# CPUs that run no shard, and every packet then costs a cross-core wake-up.
# This script gives each RX/TX queue's IRQ one shard CPU (round-robin) and
# points the queue's RPS/XPS masks at that same CPU, so softirq work for a
# queue stays on the core that took its interrupt.
#
# Idempotent: it compares the live value with the plan before each write and
# only writes what differs. Run `irq-affinity.sh --help` for usage.

set -euo pipefail

readonly PROG=irq-affinity

usage() {
    cat <<'EOF'
Usage: irq-affinity.sh --nic IFACE[,IFACE...] --cpus LIST [options]
       irq-affinity.sh --show --nic IFACE[,IFACE...] [--root DIR]

Pin each NIC queue IRQ to one of the shard CPUs and set the queue's RPS and
XPS masks to that CPU.

  --nic IFACES       network interface(s); repeatable, or separated by commas
                     or spaces (e.g. "eth0,eth1")
  --cpus LIST        shard CPUs in kernel list syntax, e.g. 0-3,8,10-11; must
                     match the CPUs corekv runs on (systemd: CPUAffinity=)
  --stop-irqbalance  stop irqbalance.service first (it would undo the pinning)
  --root DIR         use DIR/proc and DIR/sys instead of /proc and /sys
                     (for tests); never touches the host's irqbalance
  -h, --help         show this help

Modes (default: apply the plan and print what changed):
  --dry-run          print the plan and what would change; write nothing
  --check            exit 1, listing each difference, if the live state
                     differs from the plan; exit 0 if it matches
  --show             print the current state of every queue IRQ (no --cpus)

Plan: queue IRQs are found by name in /proc/interrupts among the IRQs of the
NIC's device (/sys/class/net/IFACE/device/msi_irqs). Both naming styles work:
combined queues (eth0-TxRx-0, ens5-Tx-Rx-0, mlx5_comp0@pci:..., eth0-fp-0,
virtio0-input.0 + virtio0-output.0 share queue 0) and separate RX/TX IRQs
(eth0-rx-0, eth0-tx-0). Queues are taken in index order and dealt to the
CPUs of --cpus in ascending order, continuing across NICs; queue i's IRQs
(smp_affinity_list), rx-i/rps_cpus and tx-i/xps_cpus all get the same CPU.
Masks are written as comma-separated 32-bit hex groups of 8 digits, as many
groups as the highest CPU in --cpus (or the possible CPUs, if more) needs.
Live values are compared as CPU sets, so "f" and "0000000f" are equal.

Exit status: 0 success (or --check matches), 1 --check found differences,
2 error (bad arguments, missing NIC, no queue IRQs, cannot write, ...).

Example:
  irq-affinity.sh --nic eth0 --cpus 0-15 --dry-run
  irq-affinity.sh --nic eth0 --cpus 0-15 --stop-irqbalance
  irq-affinity.sh --nic eth0 --cpus 0-15 --check
EOF
}

# Errors are one line on stderr naming the problem and the fix, exit 2.
die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 2
}

warn() {
    printf '%s: warning: %s\n' "$PROG" "$*" >&2
}

# --- CPU sets -----------------------------------------------------------------
# A CPU set travels as a space-separated ascending list ("0 1 2 8"); indexed
# bash arrays list their keys in ascending order, which sorts for free.

# cpulist_expand LIST: kernel list syntax ("0-3,8") to a CPU set.
# Returns 1 if LIST is malformed; an empty LIST is the empty set.
cpulist_expand() {
    local list=${1//[[:space:]]/} item lo hi cpu
    local -a items=() bits=()
    [[ -n $list ]] || return 0
    [[ $list =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] || return 1
    IFS=, read -ra items <<<"$list"
    for item in "${items[@]}"; do
        lo=$((10#${item%-*}))
        hi=$((10#${item#*-}))
        # 8192 is the kernel's largest NR_CPUS; it also bounds the loop.
        if ((lo > hi || hi >= 8192)); then
            return 1
        fi
        for ((cpu = lo; cpu <= hi; cpu++)); do
            bits[cpu]=1
        done
    done
    echo "${!bits[*]}"
}

# cpuset_minus A B: the CPUs of set A that are not in set B.
cpuset_minus() {
    local cpu
    local -a a=() b=() in_b=() rest=()
    read -ra a <<<"$1"
    read -ra b <<<"$2"
    for cpu in "${b[@]}"; do
        in_b[cpu]=1
    done
    for cpu in "${a[@]}"; do
        if [[ -z ${in_b[cpu]:-} ]]; then
            rest+=("$cpu")
        fi
    done
    echo "${rest[*]}"
}

# cpuset_to_list SET: CPU set to compact kernel list syntax ("0-3,8").
cpuset_to_list() {
    local out="" cpu start=-1 prev=-2
    for cpu in $1 -1; do
        if ((cpu != prev + 1)); then
            if ((start >= 0)); then
                out+=${out:+,}$start
                if ((prev > start)); then
                    out+=-$prev
                fi
            fi
            start=$cpu
        fi
        prev=$cpu
    done
    echo "$out"
}

# mask_expand MASK: kernel hex mask ("00000001,0000000f") to a CPU set.
# Each comma-separated group is 32 bits, most significant group first.
mask_expand() {
    local mask=${1//[[:space:]]/} group val bit g n
    local -a words=() bits=()
    IFS=, read -ra words <<<"$mask"
    n=${#words[@]}
    for ((g = 0; g < n; g++)); do
        group=${words[n - 1 - g]}
        [[ $group =~ ^[0-9a-fA-F]{1,8}$ ]] || return 1
        val=$((16#$group))
        for ((bit = 0; bit < 32; bit++)); do
            if (((val >> bit) & 1)); then
                bits[32 * g + bit]=1
            fi
        done
    done
    echo "${!bits[*]}"
}

# mask_format SET GROUPS: CPU set to a hex mask of GROUPS 32-bit groups.
mask_format() {
    local groups=$2 g cpu out=""
    local -a words=()
    for ((g = 0; g < groups; g++)); do
        words[g]=0
    done
    for cpu in $1; do
        words[cpu/32]=$((words[cpu / 32] | (1 << (cpu % 32))))
    done
    for ((g = groups - 1; g >= 0; g--)); do
        out+=$(printf '%08x' "${words[g]}")
        if ((g > 0)); then
            out+=,
        fi
    done
    echo "$out"
}

# --- arguments ----------------------------------------------------------------

ROOT=""
ROOT_GIVEN=0
MODE=apply
CPUS_ARG=""
CPUS_GIVEN=0
STOP_IRQBALANCE=0
NICS=()

set_mode() {
    [[ $MODE == apply || $MODE == "$1" ]] ||
        die "--$MODE and --$1 are exclusive: pick one mode (see --help)"
    MODE=$1
}

add_nics() {
    local -a words=()
    local word nic
    # systemd passes ${COREKV_NICS} as one word; accept "eth0 eth1" and "eth0,eth1".
    read -ra words <<<"${1//,/ }"
    ((${#words[@]} > 0)) ||
        die "empty NIC list: pass --nic IFACE (under systemd set COREKV_NICS in /etc/default/corekv)"
    for word in "${words[@]}"; do
        for nic in "${NICS[@]}"; do
            [[ $nic != "$word" ]] || continue 2
        done
        NICS+=("$word")
    done
}

need_value() {
    (($2 >= 2)) || die "$1 needs a value (see --help)"
}

while (($# > 0)); do
    case $1 in
    --nic)
        need_value "$1" $#
        add_nics "$2"
        shift
        ;;
    --nic=*) add_nics "${1#*=}" ;;
    --cpus)
        need_value "$1" $#
        CPUS_ARG=$2 CPUS_GIVEN=1
        shift
        ;;
    --cpus=*) CPUS_ARG=${1#*=} CPUS_GIVEN=1 ;;
    --root)
        need_value "$1" $#
        ROOT=$2 ROOT_GIVEN=1
        shift
        ;;
    --root=*) ROOT=${1#*=} ROOT_GIVEN=1 ;;
    --dry-run) set_mode dry-run ;;
    --check) set_mode check ;;
    --show) set_mode show ;;
    --stop-irqbalance) STOP_IRQBALANCE=1 ;;
    -h | --help)
        usage
        exit 0
        ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

if ((ROOT_GIVEN)); then
    [[ -d $ROOT ]] || die "--root $ROOT is not a directory: create the fake /proc+/sys tree first"
    ROOT=${ROOT%/}
fi
((${#NICS[@]} > 0)) ||
    die "no NIC given: pass --nic IFACE (under systemd set COREKV_NICS in /etc/default/corekv)"

SHARD_CPUS=""
MASK_GROUPS=1
if [[ $MODE != show ]]; then
    ((CPUS_GIVEN)) ||
        die "no CPU list given: pass --cpus LIST, e.g. --cpus 0-15 (under systemd set COREKV_CPUS in /etc/default/corekv)"
    [[ -n ${CPUS_ARG//[[:space:]]/} ]] ||
        die "empty CPU list: pass --cpus LIST, e.g. --cpus 0-15 (under systemd set COREKV_CPUS in /etc/default/corekv)"
    SHARD_CPUS=$(cpulist_expand "$CPUS_ARG") ||
        die "malformed CPU list '$CPUS_ARG': use kernel list syntax with ascending ranges below 8192, e.g. 0-3,8,10-11"

    # Refuse CPUs the machine does not have: an IRQ cannot be moved there.
    online_file=$ROOT/sys/devices/system/cpu/online
    if [[ -r $online_file ]]; then
        online=$(cpulist_expand "$(<"$online_file")") ||
            die "cannot parse $online_file"
        missing=$(cpuset_minus "$SHARD_CPUS" "$online")
        [[ -z $missing ]] ||
            die "CPUs $(cpuset_to_list "$missing") in --cpus are not online (online: $(cpuset_to_list "$online")): pick shard CPUs from the online list"
    fi

    # Under systemd this script inherits the unit's CPUAffinity=; shard CPUs
    # outside it mean COREKV_CPUS and CPUAffinity= have drifted apart.
    status_file=$ROOT/proc/self/status
    if [[ -r $status_file ]]; then
        allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$status_file")
        if allowed_set=$(cpulist_expand "$allowed") && [[ -n $allowed_set ]]; then
            outside=$(cpuset_minus "$SHARD_CPUS" "$allowed_set")
            [[ -z $outside ]] ||
                warn "CPUs $(cpuset_to_list "$outside") are outside this process's affinity ($allowed); keep --cpus (COREKV_CPUS) equal to the unit's CPUAffinity="
        fi
    fi

    # Write masks as wide as the kernel's own (possible CPUs), and at least
    # wide enough for the highest shard CPU.
    max_cpu=${SHARD_CPUS##* }
    MASK_GROUPS=$((max_cpu / 32 + 1))
    possible_file=$ROOT/sys/devices/system/cpu/possible
    if [[ -r $possible_file ]] && possible=$(cpulist_expand "$(<"$possible_file")") && [[ -n $possible ]]; then
        possible_groups=$((${possible##* } / 32 + 1))
        if ((possible_groups > MASK_GROUPS)); then
            MASK_GROUPS=$possible_groups
        fi
    fi
fi
read -ra CPU_ARRAY <<<"$SHARD_CPUS"

# --- queue discovery ----------------------------------------------------------

[[ -r $ROOT/proc/interrupts ]] ||
    die "cannot read $ROOT/proc/interrupts: is /proc mounted (or the --root tree complete)?"
# "IRQ NAME" per numbered line; the action name is the last column.
mapfile -t IRQ_LINES < <(awk '$1 ~ /^[0-9]+:$/ { sub(/:$/, "", $1); print $1, $NF }' "$ROOT/proc/interrupts")

# One entry per queue IRQ found: parallel arrays.
Q_NIC=() Q_IRQ=() Q_NAME=() Q_KIND=() Q_IDX=()

# Queue kind and index from an IRQ name; sets KIND (rxtx|rx|tx) and IDX.
readonly RE_RXTX='(^|[-_.])(txrx|tx-rx|rxtx|rx-tx|combined|comp|fp)[-_.]?([0-9]+)$'
readonly RE_RX='(^|[-_.])(rx|input)[-_.]?([0-9]+)$'
readonly RE_TX='(^|[-_.])(tx|output)[-_.]?([0-9]+)$'
classify() {
    local base=${1%%@*} nic=$2 lc rest
    lc=${base,,}
    if [[ $lc =~ $RE_RXTX ]]; then
        KIND=rxtx IDX=${BASH_REMATCH[3]}
    elif [[ $lc =~ $RE_RX ]]; then
        KIND=rx IDX=${BASH_REMATCH[3]}
    elif [[ $lc =~ $RE_TX ]]; then
        KIND=tx IDX=${BASH_REMATCH[3]}
    else
        # Plain "eth0-3" (sfc and others): a combined queue.
        rest=${lc#"${nic,,}"-}
        [[ $rest != "$lc" && $rest =~ ^[0-9]+$ ]] || return 1
        KIND=rxtx IDX=$rest
    fi
    IDX=$((10#$IDX))
}

# Without msi_irqs to go by, an IRQ belongs to the NIC only if its name says so.
name_refers_to() {
    local name=$1 nic=$2 dev=$3
    [[ $name == "$nic"[-_.@]* || $name == *[-_]"$nic"[-_.@]* ]] && return 0
    [[ -n $dev ]] || return 1
    [[ $name == "$dev"[-_.]* || $name == *"@pci:$dev" || $name == *"@$dev" ]]
}

discover() {
    local nic=$1 netdir="$ROOT/sys/class/net/$1" dev="" dir f line irq name found=0
    local -a msi=()
    local have_msi=0
    [[ -e $netdir ]] ||
        die "no such network interface: $nic (not in $ROOT/sys/class/net): check the name with 'ip -br link'"
    # Bonds, VLANs, bridges and the like have no device, hence no IRQs.
    [[ -e $netdir/device ]] ||
        die "$nic is a virtual interface with no IRQs of its own: pass the physical NICs under it (see 'ip -d link show $nic')"
    if [[ -L $netdir/device ]]; then
        dev=$(readlink -- "$netdir/device")
        dev=${dev##*/}
    fi
    # virtio-net's device is the virtio bus device; its MSI vectors belong to
    # the PCI function above it.
    for dir in "$netdir/device/msi_irqs" "$netdir/device/../msi_irqs"; do
        [[ $dir == */device/msi_irqs || $dev == virtio* ]] || continue
        if [[ -d $dir ]]; then
            for f in "$dir"/*; do
                if [[ ${f##*/} =~ ^[0-9]+$ ]]; then
                    msi[${f##*/}]=1
                fi
            done
            have_msi=1
            break
        fi
    done
    for line in "${IRQ_LINES[@]}"; do
        irq=${line%% *}
        name=${line#* }
        if ((have_msi)); then
            [[ -n ${msi[irq]:-} ]] || continue
        else
            name_refers_to "$name" "$nic" "$dev" || continue
        fi
        classify "$name" "$nic" || continue
        Q_NIC+=("$nic") Q_IRQ+=("$irq") Q_NAME+=("$name") Q_KIND+=("$KIND") Q_IDX+=("$IDX")
        found=1
    done
    ((found)) ||
        die "$nic: no queue IRQs found in $ROOT/proc/interrupts (looked for names like $nic-TxRx-0, $nic-rx-0, mlx5_comp0, virtio0-input.0): the NIC may use one legacy IRQ; check 'grep $nic /proc/interrupts' or omit it from --nic"
}

for nic in "${NICS[@]}"; do
    discover "$nic"
done

# --- show ---------------------------------------------------------------------

# read_set FILE KIND: the live CPU set in FILE (KIND list|mask), or "?" if
# FILE cannot be read or parsed, or "-" if it does not exist.
read_set() {
    local file=$1 kind=$2 raw cpus
    if [[ ! -e $file ]]; then
        echo -
        return
    fi
    # cat, not $(<file): bash ignores read errors there.
    if ! raw=$(cat -- "$file" 2>/dev/null); then
        echo "?"
        return
    fi
    if [[ $kind == list ]]; then
        cpus=$(cpulist_expand "$raw") || cpus="?"
    else
        cpus=$(mask_expand "$raw") || cpus="?"
    fi
    echo "$cpus"
}

# display SET: for humans ("0-3", "none", "-", "?").
display() {
    case $1 in
    - | "?") echo "$1" ;;
    "") echo none ;;
    *) cpuset_to_list "$1" ;;
    esac
}

irqbalance_active() {
    ((!ROOT_GIVEN)) || return 1
    command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet irqbalance.service 2>/dev/null
}

if [[ $MODE == show ]]; then
    printf '%-12s %-6s %-8s %-10s %-10s %-10s %s\n' NIC IRQ QUEUE AFFINITY RPS XPS NAME
    for i in "${!Q_IRQ[@]}"; do
        nic=${Q_NIC[i]} idx=${Q_IDX[i]} kind=${Q_KIND[i]}
        netdir=$ROOT/sys/class/net/$nic
        rps=- xps=-
        [[ $kind == tx ]] || rps=$(display "$(read_set "$netdir/queues/rx-$idx/rps_cpus" mask)")
        [[ $kind == rx ]] || xps=$(display "$(read_set "$netdir/queues/tx-$idx/xps_cpus" mask)")
        printf '%-12s %-6s %-8s %-10s %-10s %-10s %s\n' "$nic" "${Q_IRQ[i]}" "$kind-$idx" \
            "$(display "$(read_set "$ROOT/proc/irq/${Q_IRQ[i]}/smp_affinity_list" list)")" \
            "$rps" "$xps" "${Q_NAME[i]}"
    done
    if ((!ROOT_GIVEN)); then
        if irqbalance_active; then
            echo "irqbalance.service: active (it will move these IRQs; see --stop-irqbalance)"
        else
            echo "irqbalance.service: not active"
        fi
    fi
    exit 0
fi

# --- plan ---------------------------------------------------------------------
# One item per file to set: parallel arrays.
P_LABEL=() P_FILE=() P_KIND=() P_WANT=() P_VALUE=()
declare -A PLANNED=()

plan_item() { # LABEL FILE KIND(list|mask) CPU
    [[ -z ${PLANNED[$2]:-} ]] || return 0
    PLANNED[$2]=1
    P_LABEL+=("$1") P_FILE+=("$2") P_KIND+=("$3") P_WANT+=("$4")
    if [[ $3 == list ]]; then
        P_VALUE+=("$4")
    else
        P_VALUE+=("$(mask_format "$4" "$MASK_GROUPS")")
    fi
}

# plan_queue_file NIC DIR FILE CPU: RPS/XPS item, if the kernel has that file.
plan_queue_file() {
    local nic=$1 qdir=$ROOT/sys/class/net/$1/queues/$2
    if [[ ! -d $qdir ]]; then
        warn "$nic has an IRQ for queue $2 but no $qdir; leaving its ${3%_cpus} mask alone"
        return 0
    fi
    # Missing: kernel without CONFIG_RPS/XPS. Unreadable: the kernel answers
    # ENOENT for xps_cpus of a single-queue device. Either way, nothing to set.
    cat -- "$qdir/$3" >/dev/null 2>&1 || return 0
    plan_item "$nic queue $2 $3" "$qdir/$3" mask "$4"
}

next=0 # round-robin position, carried across NICs
for nic in "${NICS[@]}"; do
    declare -a idx_set=() cpu_of=()
    for i in "${!Q_IRQ[@]}"; do
        if [[ ${Q_NIC[i]} == "$nic" ]]; then
            idx_set[Q_IDX[i]]=1
        fi
    done
    for idx in "${!idx_set[@]}"; do
        cpu_of[idx]=${CPU_ARRAY[next % ${#CPU_ARRAY[@]}]}
        next=$((next + 1))
    done
    for i in "${!Q_IRQ[@]}"; do
        [[ ${Q_NIC[i]} == "$nic" ]] || continue
        plan_item "$nic irq ${Q_IRQ[i]} (${Q_NAME[i]}) smp_affinity_list" \
            "$ROOT/proc/irq/${Q_IRQ[i]}/smp_affinity_list" list "${cpu_of[Q_IDX[i]]}"
    done
    for i in "${!Q_IRQ[@]}"; do
        [[ ${Q_NIC[i]} == "$nic" ]] || continue
        idx=${Q_IDX[i]}
        [[ ${Q_KIND[i]} == tx ]] || plan_queue_file "$nic" "rx-$idx" rps_cpus "${cpu_of[idx]}"
        [[ ${Q_KIND[i]} == rx ]] || plan_queue_file "$nic" "tx-$idx" xps_cpus "${cpu_of[idx]}"
    done
    unset idx_set cpu_of
done

# --- compare, then act --------------------------------------------------------

total=${#P_FILE[@]}
P_CURRENT=()
todo=()
for i in "${!P_FILE[@]}"; do
    P_CURRENT[i]=$(read_set "${P_FILE[i]}" "${P_KIND[i]}")
    [[ ${P_CURRENT[i]} == "${P_WANT[i]}" ]] || todo+=("$i")
done

stop_irqbalance=0
if ((STOP_IRQBALANCE)); then
    if ((ROOT_GIVEN)); then
        printf '%s: note: --root given, leaving the host irqbalance alone\n' "$PROG" >&2
    elif irqbalance_active; then
        stop_irqbalance=1
    elif command -v pgrep >/dev/null 2>&1 && pgrep -x irqbalance >/dev/null; then
        die "irqbalance is running but not as irqbalance.service: stop it by hand, then rerun"
    fi
elif irqbalance_active; then
    warn "irqbalance.service is active and will move these IRQs again: rerun with --stop-irqbalance or 'systemctl disable --now irqbalance'"
fi

case $MODE in
dry-run)
    if ((stop_irqbalance)); then
        echo "would stop irqbalance.service"
    fi
    for i in "${!P_FILE[@]}"; do
        if [[ ${P_CURRENT[i]} == "${P_WANT[i]}" ]]; then
            printf 'unchanged  %s: %s\n' "${P_LABEL[i]}" "$(display "${P_WANT[i]}")"
        else
            raw=""
            if [[ ${P_KIND[i]} == mask ]]; then
                raw=" (${P_VALUE[i]})"
            fi
            printf 'would set  %s: %s -> %s%s\n' "${P_LABEL[i]}" \
                "$(display "${P_CURRENT[i]}")" "$(display "${P_WANT[i]}")" "$raw"
        fi
    done
    printf '%s: dry run: %d of %d settings would change; nothing written\n' "$PROG" "${#todo[@]}" "$total"
    ;;

check)
    differ=${#todo[@]}
    if ((stop_irqbalance)); then
        echo "differs  irqbalance.service: is active, want stopped"
        differ=$((differ + 1))
    fi
    for i in "${todo[@]}"; do
        printf 'differs  %s: is %s, want %s\n' "${P_LABEL[i]}" \
            "$(display "${P_CURRENT[i]}")" "$(display "${P_WANT[i]}")"
    done
    if ((differ > 0)); then
        printf '%s: check failed: %d setting(s) differ from the plan; apply it by rerunning without --check\n' \
            "$PROG" "$differ" >&2
        exit 1
    fi
    printf '%s: ok: all %d settings match the plan\n' "$PROG" "$total"
    ;;

apply)
    # Check every target before the first write so a bad one cannot leave
    # the NIC half-pinned.
    for i in "${todo[@]}"; do
        f=${P_FILE[i]}
        [[ -e $f ]] || die "cannot write $f: it does not exist (IRQ gone, or the --root tree is incomplete)"
        [[ -f $f ]] || die "cannot write $f: not a regular file (check the --root tree)"
        [[ -w $f ]] || die "cannot write $f: permission denied; run as root (sudo), or use --dry-run"
    done
    if ((stop_irqbalance)); then
        systemctl stop irqbalance.service ||
            die "could not stop irqbalance.service: stop it by hand ('systemctl stop irqbalance'), then rerun"
        echo "stopped irqbalance.service"
    fi
    for i in "${todo[@]}"; do
        f=${P_FILE[i]}
        if ! err=$({ printf '%s\n' "${P_VALUE[i]}" >"$f"; } 2>&1); then
            die "cannot write ${P_VALUE[i]} to $f: ${err##*: } (a kernel-managed IRQ cannot be moved: leave that NIC out of --nic)"
        fi
        printf 'set  %s: %s -> %s\n' "${P_LABEL[i]}" "$(display "${P_CURRENT[i]}")" "$(display "${P_WANT[i]}")"
    done
    if ((${#todo[@]} == 0)); then
        printf '%s: nothing to change: all %d settings already in place\n' "$PROG" "$total"
    else
        printf '%s: changed %d of %d settings\n' "$PROG" "${#todo[@]}" "$total"
    fi
    ;;
esac
