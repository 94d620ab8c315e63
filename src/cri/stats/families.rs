//! The metric families nidus serves through ListMetricDescriptors and
//! ListPodSandboxMetrics: cAdvisor's names, types and label keys (its six
//! base labels, then a family's own), so that kubelet's `/metrics/cadvisor`
//! reads as it does with cAdvisor. Help texts are nidus's own words.

/// Every container metric starts with these labels, in this order.
pub(crate) const BASE_LABELS: &[&str] = &["container", "id", "image", "name", "namespace", "pod"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
}

/// One metric family: a name, its help, its type and the labels it adds to
/// the base ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Family {
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) kind: Kind,
    pub(crate) extra: &'static [&'static str],
}

const fn counter(name: &'static str, help: &'static str, extra: &'static [&'static str]) -> Family {
    Family { name, help, kind: Kind::Counter, extra }
}

const fn gauge(name: &'static str, help: &'static str, extra: &'static [&'static str]) -> Family {
    Family { name, help, kind: Kind::Gauge, extra }
}

const NONE: &[&str] = &[];
const DEVICE: &[&str] = &["device"];

// cpu
pub(crate) const CPU_USAGE: Family =
    counter("container_cpu_usage_seconds_total", "Cpu time used, in seconds (cpu=\"total\": all cpus).", &["cpu"]);
pub(crate) const CPU_USER: Family =
    counter("container_cpu_user_seconds_total", "Cpu time used in user mode, in seconds.", NONE);
pub(crate) const CPU_SYSTEM: Family =
    counter("container_cpu_system_seconds_total", "Cpu time used in kernel mode, in seconds.", NONE);
pub(crate) const CFS_PERIODS: Family =
    counter("container_cpu_cfs_periods_total", "CFS bandwidth periods that have elapsed.", NONE);
pub(crate) const CFS_THROTTLED_PERIODS: Family =
    counter("container_cpu_cfs_throttled_periods_total", "CFS bandwidth periods in which it was throttled.", NONE);
pub(crate) const CFS_THROTTLED_SECONDS: Family =
    counter("container_cpu_cfs_throttled_seconds_total", "Time it spent throttled, in seconds.", NONE);

// memory
pub(crate) const MEMORY_USAGE: Family =
    gauge("container_memory_usage_bytes", "Memory charged to it in bytes, page cache included.", NONE);
pub(crate) const MEMORY_MAX_USAGE: Family =
    gauge("container_memory_max_usage_bytes", "The most memory ever charged to it, in bytes.", NONE);
pub(crate) const MEMORY_WORKING_SET: Family =
    gauge("container_memory_working_set_bytes", "Memory usage less inactive page cache, in bytes.", NONE);
pub(crate) const MEMORY_RSS: Family = gauge("container_memory_rss", "Anonymous memory, in bytes.", NONE);
pub(crate) const MEMORY_CACHE: Family = gauge("container_memory_cache", "Page cache, in bytes.", NONE);
pub(crate) const MEMORY_MAPPED_FILE: Family =
    gauge("container_memory_mapped_file", "Page cache mapped into its processes, in bytes.", NONE);
pub(crate) const MEMORY_KERNEL: Family =
    gauge("container_memory_kernel_usage", "Kernel memory charged to it (slab, stacks, page tables…), in bytes.", NONE);
pub(crate) const MEMORY_SWAP: Family = gauge("container_memory_swap", "Swap in use, in bytes.", NONE);
pub(crate) const MEMORY_FAILCNT: Family =
    counter("container_memory_failcnt", "Times its memory use reached the limit.", NONE);
pub(crate) const MEMORY_FAILURES: Family = counter(
    "container_memory_failures_total",
    "Page faults (failure_type pgfault or pgmajfault) of its own tasks (scope=\"container\") or of it and below (scope=\"hierarchy\").",
    &["failure_type", "scope"],
);
pub(crate) const OOM_EVENTS: Family =
    counter("container_oom_events_total", "Processes the kernel's OOM killer killed in it.", NONE);

// settings and life
pub(crate) const SPEC_MEMORY_LIMIT: Family =
    gauge("container_spec_memory_limit_bytes", "Its memory limit in bytes (0: none).", NONE);
pub(crate) const SPEC_MEMORY_SWAP_LIMIT: Family = gauge(
    "container_spec_memory_swap_limit_bytes",
    "Its swap limit in bytes as the cgroup holds it (v1: memory + swap; v2: swap alone; 0: none).",
    NONE,
);
pub(crate) const SPEC_CPU_PERIOD: Family =
    gauge("container_spec_cpu_period", "Its CFS bandwidth period, in microseconds.", NONE);
pub(crate) const SPEC_CPU_QUOTA: Family =
    gauge("container_spec_cpu_quota", "Its CFS quota per period, in microseconds (absent: none).", NONE);
pub(crate) const SPEC_CPU_SHARES: Family =
    gauge("container_spec_cpu_shares", "Its cpu shares (v2: mapped from cpu.weight).", NONE);
pub(crate) const START_TIME: Family =
    gauge("container_start_time_seconds", "When it started (else was created), in seconds since the epoch.", NONE);
pub(crate) const LAST_SEEN: Family =
    gauge("container_last_seen", "When the runtime last read it, in seconds since the epoch.", NONE);

// processes
pub(crate) const PROCESSES: Family = gauge("container_processes", "Processes in its cgroup.", NONE);
pub(crate) const THREADS: Family = gauge("container_threads", "Tasks (threads) in its cgroup.", NONE);
pub(crate) const THREADS_MAX: Family =
    gauge("container_threads_max", "Most tasks its cgroup may hold (0: no limit).", NONE);
pub(crate) const FILE_DESCRIPTORS: Family =
    gauge("container_file_descriptors", "Descriptors its processes hold open.", NONE);
pub(crate) const SOCKETS: Family = gauge("container_sockets", "Sockets its processes hold open.", NONE);

// its filesystem (the writable layer)
pub(crate) const FS_USAGE: Family =
    gauge("container_fs_usage_bytes", "Bytes its writable layer takes on the device.", DEVICE);
pub(crate) const FS_LIMIT: Family =
    gauge("container_fs_limit_bytes", "Bytes of the filesystem its writable layer is on.", DEVICE);
pub(crate) const FS_INODES: Family = gauge("container_fs_inodes_total", "Inodes its writable layer takes.", DEVICE);
pub(crate) const FS_INODES_FREE: Family =
    gauge("container_fs_inodes_free", "Free inodes of the filesystem its writable layer is on.", DEVICE);

// block I/O
pub(crate) const FS_READS_BYTES: Family =
    counter("container_fs_reads_bytes_total", "Bytes it read from the device.", DEVICE);
pub(crate) const FS_READS: Family = counter("container_fs_reads_total", "Read requests it sent the device.", DEVICE);
pub(crate) const FS_WRITES_BYTES: Family =
    counter("container_fs_writes_bytes_total", "Bytes it wrote to the device.", DEVICE);
pub(crate) const FS_WRITES: Family = counter("container_fs_writes_total", "Write requests it sent the device.", DEVICE);
pub(crate) const BLKIO_DEVICE_USAGE: Family = counter(
    "container_blkio_device_usage_total",
    "Bytes it moved to or from a block device, by operation (Read, Write).",
    &["device", "major", "minor", "operation"],
);

// pressure (cgroup v2 with PSI): stalled = no task could run, waiting = some task waited
pub(crate) const PRESSURE_CPU_STALLED: Family =
    counter("container_pressure_cpu_stalled_seconds_total", "Time all its tasks waited for a cpu, in seconds.", NONE);
pub(crate) const PRESSURE_CPU_WAITING: Family =
    counter("container_pressure_cpu_waiting_seconds_total", "Time some task of it waited for a cpu, in seconds.", NONE);
pub(crate) const PRESSURE_MEMORY_STALLED: Family = counter(
    "container_pressure_memory_stalled_seconds_total",
    "Time all its tasks waited for memory, in seconds.",
    NONE,
);
pub(crate) const PRESSURE_MEMORY_WAITING: Family = counter(
    "container_pressure_memory_waiting_seconds_total",
    "Time some task of it waited for memory, in seconds.",
    NONE,
);
pub(crate) const PRESSURE_IO_STALLED: Family =
    counter("container_pressure_io_stalled_seconds_total", "Time all its tasks waited for I/O, in seconds.", NONE);
pub(crate) const PRESSURE_IO_WAITING: Family =
    counter("container_pressure_io_waiting_seconds_total", "Time some task of it waited for I/O, in seconds.", NONE);

// the pod's network (its namespace, held by the pause: container="POD")
const INTERFACE: &[&str] = &["interface"];
pub(crate) const NET_RX_BYTES: Family =
    counter("container_network_receive_bytes_total", "Bytes received on the interface.", INTERFACE);
pub(crate) const NET_RX_PACKETS: Family =
    counter("container_network_receive_packets_total", "Packets received on the interface.", INTERFACE);
pub(crate) const NET_RX_ERRORS: Family =
    counter("container_network_receive_errors_total", "Errors while receiving on the interface.", INTERFACE);
pub(crate) const NET_RX_DROPPED: Family = counter(
    "container_network_receive_packets_dropped_total",
    "Packets dropped while receiving on the interface.",
    INTERFACE,
);
pub(crate) const NET_TX_BYTES: Family =
    counter("container_network_transmit_bytes_total", "Bytes sent on the interface.", INTERFACE);
pub(crate) const NET_TX_PACKETS: Family =
    counter("container_network_transmit_packets_total", "Packets sent on the interface.", INTERFACE);
pub(crate) const NET_TX_ERRORS: Family =
    counter("container_network_transmit_errors_total", "Errors while sending on the interface.", INTERFACE);
pub(crate) const NET_TX_DROPPED: Family = counter(
    "container_network_transmit_packets_dropped_total",
    "Packets dropped while sending on the interface.",
    INTERFACE,
);

/// Every family served on every node.
pub(crate) const ALWAYS: &[Family] = &[
    CPU_USAGE,
    CPU_USER,
    CPU_SYSTEM,
    CFS_PERIODS,
    CFS_THROTTLED_PERIODS,
    CFS_THROTTLED_SECONDS,
    MEMORY_USAGE,
    MEMORY_MAX_USAGE,
    MEMORY_WORKING_SET,
    MEMORY_RSS,
    MEMORY_CACHE,
    MEMORY_MAPPED_FILE,
    MEMORY_KERNEL,
    MEMORY_SWAP,
    MEMORY_FAILCNT,
    MEMORY_FAILURES,
    OOM_EVENTS,
    SPEC_MEMORY_LIMIT,
    SPEC_MEMORY_SWAP_LIMIT,
    SPEC_CPU_PERIOD,
    SPEC_CPU_QUOTA,
    SPEC_CPU_SHARES,
    START_TIME,
    LAST_SEEN,
    PROCESSES,
    THREADS,
    THREADS_MAX,
    FILE_DESCRIPTORS,
    SOCKETS,
    FS_USAGE,
    FS_LIMIT,
    FS_INODES,
    FS_INODES_FREE,
    FS_READS_BYTES,
    FS_READS,
    FS_WRITES_BYTES,
    FS_WRITES,
    BLKIO_DEVICE_USAGE,
    NET_RX_BYTES,
    NET_RX_PACKETS,
    NET_RX_ERRORS,
    NET_RX_DROPPED,
    NET_TX_BYTES,
    NET_TX_PACKETS,
    NET_TX_ERRORS,
    NET_TX_DROPPED,
];

/// Served where the node's cgroups have pressure files.
pub(crate) const PRESSURE: &[Family] = &[
    PRESSURE_CPU_STALLED,
    PRESSURE_CPU_WAITING,
    PRESSURE_MEMORY_STALLED,
    PRESSURE_MEMORY_WAITING,
    PRESSURE_IO_STALLED,
    PRESSURE_IO_WAITING,
];
