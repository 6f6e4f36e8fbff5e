# pin.sh: the shell side of package pin, sourced by the load scripts
# (write-parts.sh, gp-fold.sh, put-cpu.sh), which pin servers to CPU 0 and
# run their load generators on CPU 1.

# pin_pids MASK PID...: every thread of each PID on the CPUs of MASK (a hex
# mask such as 1); a process forked later inherits its parent's.
pin_pids() {
	local mask=$1 pid
	shift
	for pid in "$@"; do
		taskset -a -p "$mask" "$pid" >/dev/null 2>&1 || true
	done
}

# pid_tree PID: PID and its descendants, one a line.
pid_tree() {
	local c
	echo "$1"
	for c in $(pgrep -P "$1"); do pid_tree "$c"; done
}

# all_cpus: the mask of every CPU, to give the servers back afterwards.
all_cpus=$(printf %x $(((1 << $(nproc)) - 1)))
