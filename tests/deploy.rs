//! The deployment kit in `deploy/`.
//!
//! `irq-affinity.sh` runs against fake `/proc` + `/sys` trees (its `--root`
//! option) built in a temporary directory, and the expected files are worked
//! out here from the rule in its `--help`, not from the script. The unit, the
//! example config and the tuning files are checked with the tools that read
//! them: shellcheck, systemd-analyze, the server's `--check-config`.
//!
//! Tools come from the project's test setup script (apt packages `shellcheck`
//! and `systemd`). A test whose tool is missing fails and says so: a skipped
//! check would read as a passed one.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(rel)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A fresh directory under the system temp dir, removed on drop (on panic too).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "corekv-deploy-{tag}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // create_dir, not create_dir_all: fail rather than share a directory.
        fs::create_dir(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

// --- fake /proc + /sys --------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Combined,
    Rx,
    Tx,
}

struct QueueIrq {
    irq: u32,
    name: String,
    kind: Kind,
    queue: u32,
}

/// A NIC as the kernel shows it: queue IRQs in /proc/interrupts, its device's
/// MSI vectors in /sys/class/net/<name>/device/msi_irqs, rx-N/tx-N queues.
struct Nic {
    name: &'static str,
    queue_irqs: Vec<QueueIrq>,
    /// IRQs of the device that serve no queue (link events, mailbox, config).
    other_irqs: Vec<(u32, String)>,
    queues: u32,
    /// False for a device without msi_irqs: the script must go by IRQ names.
    msi: bool,
    /// virtio-net: `device` links to this virtio device under a PCI function,
    /// and the MSI vectors belong to the PCI function.
    virtio: Option<&'static str>,
}

impl Nic {
    /// One IRQ per queue, named by `name(i)`, numbered from `first_irq`.
    fn combined(nic: &'static str, first_irq: u32, queues: u32, name: impl Fn(u32) -> String) -> Nic {
        Nic {
            name: nic,
            queue_irqs: (0..queues)
                .map(|q| QueueIrq { irq: first_irq + q, name: name(q), kind: Kind::Combined, queue: q })
                .collect(),
            other_irqs: Vec::new(),
            queues,
            msi: true,
            virtio: None,
        }
    }

    /// `<nic>-rx-N` IRQs from `first_irq`, then `<nic>-tx-N` after them.
    fn separate(nic: &'static str, first_irq: u32, queues: u32) -> Nic {
        let rx = (0..queues).map(|q| QueueIrq {
            irq: first_irq + q,
            name: format!("{nic}-rx-{q}"),
            kind: Kind::Rx,
            queue: q,
        });
        let tx = (0..queues).map(|q| QueueIrq {
            irq: first_irq + queues + q,
            name: format!("{nic}-tx-{q}"),
            kind: Kind::Tx,
            queue: q,
        });
        Nic { name: nic, queue_irqs: rx.chain(tx).collect(), other_irqs: Vec::new(), queues, msi: true, virtio: None }
    }

    /// virtio-net: `virtioN-input.Q` and `virtioN-output.Q` interleaved after
    /// `virtioN-config`, as the driver requests them.
    fn virtio(nic: &'static str, dev: &'static str, config_irq: u32, queues: u32) -> Nic {
        let mut queue_irqs = Vec::new();
        for q in 0..queues {
            let base = config_irq + 1 + 2 * q;
            queue_irqs.push(QueueIrq { irq: base, name: format!("{dev}-input.{q}"), kind: Kind::Rx, queue: q });
            queue_irqs.push(QueueIrq { irq: base + 1, name: format!("{dev}-output.{q}"), kind: Kind::Tx, queue: q });
        }
        Nic {
            name: nic,
            queue_irqs,
            other_irqs: vec![(config_irq, format!("{dev}-config"))],
            queues,
            msi: true,
            virtio: Some(dev),
        }
    }

    fn with_other_irq(mut self, irq: u32, name: &str) -> Nic {
        self.other_irqs.push((irq, name.to_string()));
        self
    }

    fn without_msi(mut self) -> Nic {
        self.msi = false;
        self
    }
}

/// The IRQ affinity every fake IRQ starts with: all CPUs, the kernel default.
const INITIAL_AFFINITY: &str = "0-3";

struct Tree {
    dir: TempDir,
}

impl Tree {
    /// `foreign`: IRQs of other devices, which the script must leave alone.
    fn build(tag: &str, nics: &[&Nic], foreign: &[(u32, &str)]) -> Tree {
        let tree = Tree { dir: TempDir::new(tag) };
        let mut irqs: BTreeMap<u32, String> = foreign.iter().map(|(n, s)| (*n, s.to_string())).collect();
        for (slot, nic) in nics.iter().enumerate() {
            let mut mine: Vec<(u32, String)> = nic.other_irqs.clone();
            mine.extend(nic.queue_irqs.iter().map(|q| (q.irq, q.name.clone())));
            let net = format!("sys/class/net/{}", nic.name);
            let msi_dir = match nic.virtio {
                Some(dev) => {
                    let pci = format!("sys/devices/pci0000:00/0000:00:0{}.0", slot + 3);
                    tree.mkdir(&format!("{pci}/{dev}"));
                    tree.mkdir(&net);
                    symlink(
                        format!("../../../devices/pci0000:00/0000:00:0{}.0/{dev}", slot + 3),
                        tree.path(&format!("{net}/device")),
                    )
                    .unwrap();
                    format!("{pci}/msi_irqs")
                }
                None => {
                    tree.mkdir(&format!("{net}/device"));
                    format!("{net}/device/msi_irqs")
                }
            };
            if nic.msi {
                for (irq, _) in &mine {
                    tree.write(&format!("{msi_dir}/{irq}"), "msix\n");
                }
            }
            for q in 0..nic.queues {
                tree.write(&format!("{net}/queues/rx-{q}/rps_cpus"), "0\n");
                tree.write(&format!("{net}/queues/tx-{q}/xps_cpus"), "0\n");
            }
            for (irq, name) in mine {
                assert!(irqs.insert(irq, name).is_none(), "IRQ {irq} used twice in the fixture");
            }
        }
        let mut interrupts = String::from("            CPU0       CPU1       CPU2       CPU3\n");
        for (vector, (irq, name)) in irqs.iter().enumerate() {
            interrupts += &format!(
                "{irq:>4}: {:>10} {:>10} {:>10} {:>10}  PCI-MSIX-0000:3b:00.0 {vector}-edge      {name}\n",
                1000 + irq,
                0,
                7,
                0
            );
            tree.write(&format!("proc/irq/{irq}/smp_affinity_list"), &format!("{INITIAL_AFFINITY}\n"));
            tree.write(&format!("proc/irq/{irq}/smp_affinity"), "f\n");
        }
        interrupts += " NMI:          0          0          0          0   Non-maskable interrupts\n";
        interrupts += " LOC:     123456     234567     345678     456789   Local timer interrupts\n";
        tree.write("proc/interrupts", &interrupts);
        tree
    }

    fn root(&self) -> &str {
        self.dir.0.to_str().unwrap()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.0.join(rel)
    }

    fn mkdir(&self, rel: &str) {
        fs::create_dir_all(self.path(rel)).unwrap();
    }

    fn write(&self, rel: &str, contents: &str) {
        let path = self.path(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, contents).unwrap();
    }

    /// A file's contents without the trailing newline.
    fn get(&self, rel: &str) -> String {
        read(&self.path(rel)).trim_end_matches('\n').to_string()
    }

    fn affinity(&self, irq: u32) -> String {
        self.get(&format!("proc/irq/{irq}/smp_affinity_list"))
    }

    fn rps(&self, nic: &str, queue: u32) -> String {
        self.get(&format!("sys/class/net/{nic}/queues/rx-{queue}/rps_cpus"))
    }

    fn xps(&self, nic: &str, queue: u32) -> String {
        self.get(&format!("sys/class/net/{nic}/queues/tx-{queue}/xps_cpus"))
    }

    /// Every file and link with its contents and mtime, to prove nothing was
    /// written. Sleeps first: file timestamps tick at jiffy granularity.
    fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
        std::thread::sleep(Duration::from_millis(20));
        let mut files = BTreeMap::new();
        let mut todo = vec![self.dir.0.clone()];
        while let Some(dir) = todo.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    todo.push(path.clone());
                }
                let contents = if meta.is_file() {
                    fs::read(&path).unwrap()
                } else if meta.is_symlink() {
                    fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes()
                } else {
                    Vec::new()
                };
                files.insert(path, (contents, meta.modified().unwrap()));
            }
        }
        files
    }

    /// Runs the script with `--root <tree>` and `args`.
    fn run(&self, args: &[&str]) -> Run {
        let mut all = vec!["--root", self.root()];
        all.extend_from_slice(args);
        irq_affinity(&all)
    }
}

// --- running the script -------------------------------------------------------

struct Run {
    args: Vec<String>,
    code: i32,
    stdout: String,
    stderr: String,
}

fn irq_affinity(args: &[&str]) -> Run {
    let out = Command::new("bash")
        .arg(deploy("irq-affinity.sh"))
        .args(args)
        .output()
        .expect("run bash deploy/irq-affinity.sh");
    Run {
        args: args.iter().map(|a| a.to_string()).collect(),
        code: out.status.code().expect("script killed by a signal"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

impl Run {
    fn context(&self) -> String {
        format!(
            "irq-affinity.sh {:?}\nexit {}\n--- stdout\n{}--- stderr\n{}",
            self.args, self.code, self.stdout, self.stderr
        )
    }

    fn ok(self) -> Run {
        assert_eq!(self.code, 0, "expected success\n{}", self.context());
        self
    }

    /// Exit 2 with one line on stderr that names the problem (`needles`) and
    /// nothing on stdout.
    fn fails_with(&self, needles: &[&str]) {
        assert_eq!(self.code, 2, "expected exit 2\n{}", self.context());
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected one line on stderr\n{}", self.context());
        assert!(lines[0].starts_with("irq-affinity: error: "), "unexpected message\n{}", self.context());
        for needle in needles {
            assert!(lines[0].contains(needle), "stderr lacks {needle:?}\n{}", self.context());
        }
        assert_eq!(self.stdout, "", "nothing on stdout for an error\n{}", self.context());
    }
}

// --- the plan, worked out independently -----------------------------------------

/// A CPU set as the kernel's hex mask: 32-bit groups of 8 hex digits, most
/// significant first, separated by commas.
fn mask(cpus: &[u32], groups: usize) -> String {
    let mut words = vec![0u32; groups];
    for &cpu in cpus {
        words[(cpu / 32) as usize] |= 1 << (cpu % 32);
    }
    words.iter().rev().map(|w| format!("{w:08x}")).collect::<Vec<_>>().join(",")
}

/// The files the script must write and their contents, by the rule in its
/// --help: each NIC's queues in index order are dealt to `cpus` in turn,
/// carrying on across NICs; a queue's IRQs, rps_cpus and xps_cpus all get its
/// CPU.
fn plan(nics: &[&Nic], cpus: &[u32], groups: usize) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut next = 0;
    for nic in nics {
        let queues: BTreeSet<u32> = nic.queue_irqs.iter().map(|q| q.queue).collect();
        let cpu_of: BTreeMap<u32, u32> = queues
            .iter()
            .map(|&q| {
                let cpu = cpus[next % cpus.len()];
                next += 1;
                (q, cpu)
            })
            .collect();
        for q in &nic.queue_irqs {
            let cpu = cpu_of[&q.queue];
            files.insert(format!("proc/irq/{}/smp_affinity_list", q.irq), cpu.to_string());
            let net = format!("sys/class/net/{}/queues", nic.name);
            if q.kind != Kind::Tx {
                files.insert(format!("{net}/rx-{}/rps_cpus", q.queue), mask(&[cpu], groups));
            }
            if q.kind != Kind::Rx {
                files.insert(format!("{net}/tx-{}/xps_cpus", q.queue), mask(&[cpu], groups));
            }
        }
    }
    files
}

fn assert_files(tree: &Tree, want: &BTreeMap<String, String>) {
    for (rel, value) in want {
        assert_eq!(&tree.get(rel), value, "{rel}");
    }
}

/// The whole cycle on one tree: --check fails, --dry-run writes nothing, apply
/// writes exactly `want`, --check passes, a second apply changes nothing.
fn apply_cycle(tree: &Tree, args: &[&str], want: &BTreeMap<String, String>) {
    let check = tree.run(&[args, &["--check"]].concat());
    assert_eq!(check.code, 1, "--check before applying must fail\n{}", check.context());
    assert!(check.stdout.contains("differs"), "--check lists differences\n{}", check.context());
    assert!(check.stderr.contains("check failed"), "{}", check.context());

    let before = tree.snapshot();
    let dry = tree.run(&[args, &["--dry-run"]].concat()).ok();
    assert!(dry.stdout.contains("would set"), "{}", dry.context());
    assert!(dry.stdout.contains("nothing written"), "{}", dry.context());
    assert!(before == tree.snapshot(), "--dry-run wrote to the tree\n{}", dry.context());

    let changes = want.iter().filter(|(rel, value)| tree.get(rel) != **value).count();
    let applied = tree.run(args).ok();
    assert!(applied.stdout.contains(&format!("changed {changes} of")), "{}", applied.context());
    assert_files(tree, want);
    // Every change is printed: one "set" line per file written.
    let set_lines = applied.stdout.lines().filter(|l| l.starts_with("set ")).count();
    assert_eq!(set_lines, changes, "{}", applied.context());

    let check = tree.run(&[args, &["--check"]].concat()).ok();
    assert!(check.stdout.contains("ok: all"), "{}", check.context());

    let before = tree.snapshot();
    let again = tree.run(args).ok();
    assert!(again.stdout.contains("nothing to change"), "{}", again.context());
    assert!(before == tree.snapshot(), "a second apply wrote to the tree\n{}", again.context());
}

// --- the IRQ script -------------------------------------------------------------

#[test]
fn combined_queues_are_dealt_round_robin() {
    let nic = Nic::combined("eth0", 40, 8, |q| format!("eth0-TxRx-{q}")).with_other_irq(39, "eth0");
    let tree = Tree::build("combined", &[&nic], &[(24, "timer"), (60, "nvme0q1"), (61, "eth1-TxRx-0")]);
    let want = plan(&[&nic], &[0, 1, 2, 3], 1);
    assert_eq!(want.len(), 8 * 3);

    apply_cycle(&tree, &["--nic", "eth0", "--cpus", "0-3"], &want);

    // The same, spelled out: queue q goes to CPU q % 4.
    assert_eq!(tree.affinity(40), "0");
    assert_eq!(tree.affinity(45), "1");
    assert_eq!(tree.rps("eth0", 5), "00000002");
    assert_eq!(tree.xps("eth0", 7), "00000008");
    // Not queue IRQs of eth0: untouched.
    for irq in [24, 39, 60, 61] {
        assert_eq!(tree.affinity(irq), INITIAL_AFFINITY, "IRQ {irq}");
    }

    // Live values compare as CPU sets: the kernel prints masks without the
    // padding the script writes.
    tree.write("sys/class/net/eth0/queues/rx-1/rps_cpus", "2\n");
    tree.write("proc/irq/42/smp_affinity_list", "2-2\n");
    tree.run(&["--nic", "eth0", "--cpus", "0-3", "--check"]).ok();
    // A real difference is named.
    tree.write("sys/class/net/eth0/queues/rx-1/rps_cpus", "3\n");
    let check = tree.run(&["--nic", "eth0", "--cpus", "0-3", "--check"]);
    assert_eq!(check.code, 1, "{}", check.context());
    assert_eq!(check.stdout, "differs  eth0 queue rx-1 rps_cpus: is 0-1, want 1\n", "{}", check.context());
}

#[test]
fn separate_rx_and_tx_irqs_share_their_queue_cpu() {
    let nic = Nic::separate("eth0", 50, 4).with_other_irq(49, "eth0");
    let tree = Tree::build("separate", &[&nic], &[(24, "timer")]);
    let want = plan(&[&nic], &[0, 1, 2, 3], 1);
    assert_eq!(want.len(), 4 * 2 + 4 + 4);

    apply_cycle(&tree, &["--nic", "eth0", "--cpus", "0-3"], &want);

    // rx-q (IRQ 50+q) and tx-q (IRQ 54+q) both on CPU q.
    for q in 0..4 {
        assert_eq!(tree.affinity(50 + q), q.to_string());
        assert_eq!(tree.affinity(54 + q), q.to_string());
        assert_eq!(tree.rps("eth0", q), format!("{:08x}", 1 << q));
        assert_eq!(tree.xps("eth0", q), format!("{:08x}", 1 << q));
    }
    assert_eq!(tree.affinity(49), INITIAL_AFFINITY);

    // A new CPU list re-plans from the live state: 0,2 -> CPU 1; 1,3 -> CPU 3.
    apply_cycle(&tree, &["--nic", "eth0", "--cpus", "1,3"], &plan(&[&nic], &[1, 3], 1));
    assert_eq!((0..8).map(|i| tree.affinity(50 + i)).collect::<Vec<_>>(), ["1", "3", "1", "3", "1", "3", "1", "3"]);
}

#[test]
fn every_naming_style_and_several_nics() {
    // mlx5: completion IRQs named after the PCI function; the async IRQ is
    // not a queue, and port 2's IRQs (another function) are not eth0's.
    let mlx5 = Nic::combined("eth0", 70, 4, |q| format!("mlx5_comp{q}@pci:0000:3b:00.0"))
        .with_other_irq(69, "mlx5_async0@pci:0000:3b:00.0");
    // virtio-net: separate input/output IRQs, MSI vectors on the PCI parent.
    let virtio = Nic::virtio("eth1", "virtio2", 90, 4);
    // AWS ENA: "Tx-Rx" with a dash, and a management IRQ.
    let ena =
        Nic::combined("ens5", 101, 4, |q| format!("ens5-Tx-Rx-{q}")).with_other_irq(100, "ena-mgmnt@pci:0000:00:05.0");
    // bnx2x-style names on a device without msi_irqs: matched by name, and
    // "eth22" must not pass for "eth2".
    let by_name = Nic::combined("eth2", 110, 2, |q| format!("eth2-fp-{q}")).without_msi();
    let foreign = [(80, "mlx5_comp0@pci:0000:3b:00.1"), (81, "eth22-fp-0"), (24, "timer")];
    let tree = Tree::build("styles", &[&mlx5, &virtio, &ena, &by_name], &foreign);

    // Six CPUs for 14 queues, so the deal visibly carries on across NICs.
    let cpus = [0, 1, 2, 3, 4, 5];
    let want = plan(&[&mlx5, &virtio, &ena, &by_name], &cpus, 1);
    apply_cycle(&tree, &["--nic", "eth0,eth1", "--nic", "ens5 eth2", "--cpus", "0-5"], &want);

    assert_eq!(tree.affinity(72), "2"); // eth0 queue 2
    assert_eq!(tree.affinity(91), "4"); // eth1 input.0: fifth queue overall
    assert_eq!(tree.affinity(92), "4"); // eth1 output.0: same queue
    assert_eq!(tree.affinity(104), "5"); // ens5 queue 3: twelfth queue overall
    assert_eq!(tree.affinity(111), "1"); // eth2 queue 1: fourteenth
    for irq in [69, 90, 100, 80, 81, 24] {
        assert_eq!(tree.affinity(irq), INITIAL_AFFINITY, "IRQ {irq} is not a queue IRQ of these NICs");
    }
}

#[test]
fn masks_past_32_cpus_use_comma_separated_groups() {
    let nic = Nic::combined("eth0", 40, 4, |q| format!("eth0-TxRx-{q}"));
    let tree = Tree::build("wide", &[&nic], &[]);
    // As wide as the kernel's own masks: 128 possible CPUs, four groups.
    tree.write("sys/devices/system/cpu/possible", "0-127\n");
    let want = plan(&[&nic], &[0, 33, 64, 65], 4);
    apply_cycle(&tree, &["--nic", "eth0", "--cpus", "0,33,64-65"], &want);

    assert_eq!(tree.affinity(41), "33");
    assert_eq!(tree.rps("eth0", 0), "00000000,00000000,00000000,00000001");
    assert_eq!(tree.rps("eth0", 1), "00000000,00000000,00000002,00000000");
    assert_eq!(tree.xps("eth0", 2), "00000000,00000001,00000000,00000000");
    assert_eq!(tree.xps("eth0", 3), "00000000,00000002,00000000,00000000");

    // Without a possible-CPU list, just wide enough for the highest CPU.
    let tree = Tree::build("wide-min", &[&nic], &[]);
    apply_cycle(&tree, &["--nic", "eth0", "--cpus", "0,33,64-65"], &plan(&[&nic], &[0, 33, 64, 65], 3));
    assert_eq!(tree.rps("eth0", 1), "00000000,00000002,00000000");
}

#[test]
fn bad_input_fails_with_one_clear_line() {
    let nic = Nic::combined("eth0", 40, 4, |q| format!("eth0-TxRx-{q}"));
    // eth5 exists but has only its link IRQ: no queue IRQs.
    let no_queues = Nic::combined("eth5", 0, 0, |_| String::new()).with_other_irq(59, "eth5");
    let tree = Tree::build("errors", &[&nic, &no_queues], &[]);
    let run = |args: &[&str]| tree.run(args);

    run(&["--nic", "eth9", "--cpus", "0-3"]).fails_with(&["no such network interface: eth9", "ip -br link"]);
    run(&["--nic", "eth5", "--cpus", "0-3"]).fails_with(&["eth5: no queue IRQs found"]);
    tree.mkdir("sys/class/net/bond0/bonding");
    run(&["--nic", "eth0,bond0", "--cpus", "0-3"]).fails_with(&["bond0 is a virtual interface", "physical NICs"]);
    run(&["--nic", "", "--cpus", "0-3"]).fails_with(&["empty NIC list", "COREKV_NICS"]);
    run(&["--cpus", "0-3"]).fails_with(&["no NIC given", "--nic"]);
    run(&["--nic", "eth0", "--cpus", ""]).fails_with(&["empty CPU list", "COREKV_CPUS"]);
    run(&["--nic", "eth0", "--cpus", " "]).fails_with(&["empty CPU list"]);
    run(&["--nic", "eth0"]).fails_with(&["no CPU list given", "--cpus"]);
    for bad in ["3-1", "0-3x", "1,,2", "-1", "0-", "a", "0-3,", "0-8192"] {
        run(&["--nic", "eth0", "--cpus", bad])
            .fails_with(&[format!("malformed CPU list '{bad}'").as_str(), "0-3,8,10-11"]);
    }
    run(&["--nic", "eth0", "--cpus"]).fails_with(&["--cpus needs a value"]);
    run(&["--nic", "eth0", "--cpus", "0-3", "--frobnicate"]).fails_with(&["unknown argument '--frobnicate'"]);
    run(&["--nic", "eth0", "--cpus", "0-3", "--check", "--dry-run"])
        .fails_with(&["--check and --dry-run are exclusive"]);
    irq_affinity(&["--root", "/nonexistent/corekv-tree", "--nic", "eth0", "--cpus", "0"])
        .fails_with(&["/nonexistent/corekv-tree is not a directory"]);

    // More CPUs than the machine has online.
    tree.write("sys/devices/system/cpu/online", "0-3\n");
    run(&["--nic", "eth0", "--cpus", "0-7"]).fails_with(&["CPUs 4-7 in --cpus are not online", "online: 0-3"]);
    run(&["--nic", "eth0", "--cpus", "2-3"]).ok();

    // A target that cannot be written (a directory in its place: the tests
    // run as root, which chmod does not stop). Found before the first write,
    // so nothing is half-applied.
    let tree = Tree::build("unwritable", &[&nic], &[]);
    fs::remove_file(tree.path("proc/irq/42/smp_affinity_list")).unwrap();
    tree.mkdir("proc/irq/42/smp_affinity_list");
    let before = tree.snapshot();
    let unwritable = tree.path("proc/irq/42/smp_affinity_list");
    tree.run(&["--nic", "eth0", "--cpus", "0-3"])
        .fails_with(&[format!("cannot write {}", unwritable.display()).as_str(), "not a regular file"]);
    assert!(before == tree.snapshot(), "a failed preflight must write nothing");
}

#[test]
fn show_prints_the_live_state_per_queue() {
    let nic = Nic::separate("eth0", 50, 2);
    let tree = Tree::build("show", &[&nic], &[]);
    tree.run(&["--nic", "eth0", "--cpus", "2-3"]).ok();
    let before = tree.snapshot();
    let show = tree.run(&["--show", "--nic", "eth0"]).ok();
    assert!(before == tree.snapshot(), "--show wrote to the tree");
    let rows: Vec<Vec<&str>> = show.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        rows,
        [
            vec!["NIC", "IRQ", "QUEUE", "AFFINITY", "RPS", "XPS", "NAME"],
            vec!["eth0", "50", "rx-0", "2", "2", "-", "eth0-rx-0"],
            vec!["eth0", "51", "rx-1", "3", "3", "-", "eth0-rx-1"],
            vec!["eth0", "52", "tx-0", "2", "-", "2", "eth0-tx-0"],
            vec!["eth0", "53", "tx-1", "3", "-", "3", "eth0-tx-1"],
        ],
        "{}",
        show.context()
    );
}

#[test]
fn stop_irqbalance_never_touches_the_host_under_root() {
    let nic = Nic::combined("eth0", 40, 2, |q| format!("eth0-TxRx-{q}"));
    let tree = Tree::build("irqbalance", &[&nic], &[]);
    let run = tree.run(&["--nic", "eth0", "--cpus", "0-1", "--stop-irqbalance"]).ok();
    assert!(run.stderr.contains("leaving the host irqbalance alone"), "{}", run.context());
    assert!(!run.stdout.contains("stopped irqbalance"), "{}", run.context());
}

#[test]
fn help_documents_the_cli() {
    let help = irq_affinity(&["--help"]).ok();
    for flag in ["--nic", "--cpus", "--root", "--dry-run", "--check", "--show", "--stop-irqbalance", "Exit status"] {
        assert!(help.stdout.contains(flag), "--help does not mention {flag}\n{}", help.context());
    }
}

/// The README's and the unit's invocations of the script work as written.
#[test]
fn documented_invocations_run() {
    let nic = Nic::combined("eth0", 40, 16, |q| format!("eth0-TxRx-{q}"));
    let tree = Tree::build("documented", &[&nic], &[]);

    // The unit's ExecStartPre with /etc/default/corekv from corekv.default,
    // expanded as systemd does: "${VAR}" is one argument.
    let defaults: BTreeMap<String, String> = read(&deploy("corekv.default"))
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains('='))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.trim().to_string(), v.trim().trim_matches('"').to_string())
        })
        .collect();
    let unit = read(&deploy("corekv.service"));
    let pre = unit_values(&unit, "ExecStartPre");
    assert_eq!(pre.len(), 1, "one ExecStartPre: {pre:?}");
    let pre = pre[0].strip_prefix('+').expect("ExecStartPre runs with full privileges (+)");
    let mut words = pre.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/sbin/corekv-irq-affinity"));
    let args: Vec<String> = words
        .map(|w| match w.strip_prefix("${").and_then(|w| w.strip_suffix('}')) {
            Some(var) => defaults.get(var).unwrap_or_else(|| panic!("corekv.default lacks {var}")).clone(),
            None => w.to_string(),
        })
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    tree.run(&args).ok();

    let readme = read(&deploy("README.md"));
    let commands: Vec<&str> = readme.lines().filter(|l| l.starts_with("corekv-irq-affinity ")).collect();
    assert!(commands.len() >= 4, "README shows --show, --dry-run, apply and --check: {commands:?}");
    for command in commands {
        let args: Vec<&str> = command.split_whitespace().skip(1).collect();
        tree.run(&args).ok();
    }
    tree.run(&["--nic", "eth0", "--cpus", "0-15", "--check"]).ok();
}

// --- the other files, through the tools that read them ---------------------------

/// Path of `tool`, or a failure saying how to install it.
fn require_tool(tool: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false))
        .unwrap_or_else(|| {
            panic!(
                "`{tool}` is not installed: run the project's test setup script \
                 (it does `apt-get install -y {package}`)"
            )
        })
}

#[test]
fn irq_script_is_shellcheck_clean() {
    let shellcheck = require_tool("shellcheck", "shellcheck");
    let out = Command::new(shellcheck).arg(deploy("irq-affinity.sh")).output().unwrap();
    assert!(
        out.status.success(),
        "shellcheck deploy/irq-affinity.sh:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Values of `key=` lines in a unit file, in order.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines().filter_map(|l| l.strip_prefix(key)?.strip_prefix('=')).map(|v| v.trim().to_string()).collect()
}

#[test]
fn systemd_unit_verifies() {
    let analyze = require_tool("systemd-analyze", "systemd");
    let tmp = TempDir::new("unit");
    // verify checks that Exec* programs exist and are executable: point them
    // at the server built for this test and an executable copy of the script.
    let script = tmp.0.join("corekv-irq-affinity");
    fs::copy(deploy("irq-affinity.sh"), &script).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let unit = read(&deploy("corekv.service"));
    for program in ["/usr/local/bin/corekv ", "/usr/local/sbin/corekv-irq-affinity "] {
        assert!(unit.contains(program), "the unit runs {program}");
    }
    let unit = unit
        .replace("/usr/local/bin/corekv", env!("CARGO_BIN_EXE_corekv"))
        .replace("/usr/local/sbin/corekv-irq-affinity", script.to_str().unwrap());
    let path = tmp.0.join("corekv.service");
    fs::write(&path, unit).unwrap();

    let out = Command::new(analyze).arg("verify").arg(&path).output().unwrap();
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "systemd-analyze verify failed:\n{output}");
    // verify exits 0 on unknown keys and bad values, only printing them; any
    // line about our unit is a finding.
    let findings: Vec<&str> = output.lines().filter(|l| l.contains("corekv.service")).collect();
    assert!(findings.is_empty(), "systemd-analyze verify:\n{}", findings.join("\n"));
}

#[test]
fn unit_defaults_and_limits_agree() {
    let unit = read(&deploy("corekv.service"));
    let one = |key: &str| {
        let values = unit_values(&unit, key);
        assert_eq!(values.len(), 1, "{key}= once in the unit: {values:?}");
        values[0].clone()
    };
    assert_eq!(one("ExecStart"), "/usr/local/bin/corekv /etc/corekv/corekv.conf");
    assert_eq!(one("EnvironmentFile"), "-/etc/default/corekv");
    assert_eq!(one("LimitMEMLOCK"), "infinity");
    assert_eq!(one("Restart"), "on-failure");
    let pre = one("ExecStartPre");
    assert!(pre.contains("--nic ${COREKV_NICS}") && pre.contains("--cpus ${COREKV_CPUS}"), "{pre}");
    // A syscall filter must let io_uring through.
    for filter in unit_values(&unit, "SystemCallFilter") {
        assert!(filter.contains("io_uring_setup"), "SystemCallFilter={filter} blocks io_uring");
    }

    // The shard CPUs in one place: COREKV_CPUS is CPUAffinity=.
    let defaults = read(&deploy("corekv.default"));
    let cpus = format!("COREKV_CPUS=\"{}\"", one("CPUAffinity"));
    assert!(defaults.lines().any(|l| l == cpus), "corekv.default must set {cpus}");

    // Login sessions get the same limits as the unit.
    let nofile = one("LimitNOFILE");
    let limits = read(&deploy("limits.d/corekv.conf"));
    let mut items = BTreeSet::new();
    for line in limits.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "limits.conf lines are: domain type item value: {line:?}");
        assert_eq!(fields[0], "corekv");
        let want = match fields[2] {
            "memlock" => "unlimited",
            "nofile" => nofile.as_str(),
            other => panic!("unexpected limit {other}"),
        };
        assert_eq!(fields[3], want, "{line}");
        items.insert((fields[1], fields[2]));
    }
    assert_eq!(items.len(), 4, "soft and hard memlock and nofile: {items:?}");
}

#[test]
fn sysctl_file_is_well_formed_and_documented() {
    let text = read(&deploy("sysctl.d/60-corekv.conf"));
    let lines: Vec<&str> = text.lines().collect();
    let mut settings = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        assert!(i > 0 && lines[i - 1].starts_with('#'), "line {}: no comment saying why: {line}", i + 1);
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("line {}: not key = value", i + 1));
        let (key, optional) = match key.trim().strip_prefix('-') {
            Some(key) => (key, true),
            None => (key.trim(), false),
        };
        // A typo in a key would be skipped silently at boot.
        let proc = Path::new("/proc/sys").join(key.replace('.', "/"));
        assert!(optional || proc.exists(), "line {}: no such sysctl {key} ({})", i + 1, proc.display());
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(settings.insert(key.to_string(), value).is_none(), "{key} set twice");
    }
    for key in [
        "net.core.somaxconn",
        "net.ipv4.tcp_max_syn_backlog",
        "net.core.netdev_max_backlog",
        "net.ipv4.tcp_fastopen",
        "net.ipv4.tcp_tw_reuse",
    ] {
        assert!(settings.contains_key(key), "{key} missing");
    }
    assert_eq!(settings["vm.overcommit_memory"], "1");
    assert_eq!(settings["kernel.io_uring_disabled"], "0");
    // Ephemeral ports must not overlap the server's ports (6379, 7000+).
    let range: Vec<u32> = settings["net.ipv4.ip_local_port_range"].split(' ').map(|p| p.parse().unwrap()).collect();
    assert!(range[0] > 7999 && range[0] < range[1], "ip_local_port_range {range:?}");
}

/// The configuration contract with the server: name and default ("" where the
/// example shows a commented-out directive because there is no fixed default).
const SETTINGS: &[(&str, &str)] = &[
    ("port", "6379"),
    ("bind", "127.0.0.1"),
    ("shards", ""),
    ("cpus", ""),
    ("databases", "16"),
    ("requirepass", ""),
    ("protected-mode", "yes"),
    ("aclfile", ""),
    ("acllog-max-len", "128"),
    ("acl-pubsub-default", "resetchannels"),
    ("maxclients", "10000"),
    ("proto-max-bulk-len", "512mb"),
    ("client-query-buffer-limit", "1gb"),
    ("hll-sparse-max-bytes", "3000"),
    ("hz", "10"),
    ("busy-reply-threshold", "5000"),
    ("timeout", "0"),
    ("tcp-keepalive", "300"),
    ("tcp-backlog", "511"),
    ("client-ring", "yes"),
    ("client-ring-sqpoll", "0"),
    ("client-ring-gather-us", "0"),
    ("cluster-mode", "no"),
    ("cluster-announce-ip", ""),
    ("cluster-port-base", ""),
    ("cluster-config-file", ""),
    ("loglevel", "notice"),
    ("logfile", "\"\""),
    ("list-max-listpack-size", "-2"),
    ("list-compress-depth", "0"),
    ("hash-max-listpack-entries", "512"),
    ("hash-max-listpack-value", "64"),
    ("set-max-intset-entries", "512"),
    ("save", "3600 1 300 100 60 10000"),
    ("dbfilename", "dump.rdb"),
    ("dir", ""),
    ("rdbcompression", "yes"),
    ("rdbchecksum", "yes"),
    ("stop-writes-on-bgsave-error", "yes"),
    ("rdb-del-sync-files", "no"),
    ("rdb-key-save-delay", "0"),
    ("appendonly", "no"),
    ("appenddirname", "appendonlydir"),
    ("appendfilename", "appendonly.aof"),
    ("appendfsync", "everysec"),
    ("no-appendfsync-on-rewrite", "no"),
    ("aof-load-truncated", "yes"),
    ("aof-use-rdb-preamble", "yes"),
    ("zset-max-listpack-entries", "128"),
    ("zset-max-listpack-value", "64"),
    ("client-output-buffer-limit", "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"),
    ("replicaof", ""),
    ("masterauth", ""),
    ("masteruser", ""),
    ("replica-read-only", "yes"),
    ("replica-serve-stale-data", "yes"),
    ("repl-backlog-size", "1mb"),
    ("repl-backlog-ttl", "3600"),
    ("repl-diskless-sync", "yes"),
    ("repl-diskless-sync-delay", "5"),
    ("repl-ping-replica-period", "10"),
    ("repl-timeout", "60"),
    ("min-replicas-to-write", "0"),
    ("min-replicas-max-lag", "10"),
    ("replica-priority", "100"),
    ("replica-output-buffer-compression", "no"),
    ("replica-output-buffer-compression-level", "0"),
    ("replica-output-buffer-block-size", "16384"),
    ("maxmemory", "0"),
    ("maxmemory-policy", "noeviction"),
    ("maxmemory-samples", "5"),
    ("maxmemory-eviction-tenacity", "10"),
    ("lfu-log-factor", "10"),
    ("lfu-decay-time", "1"),
    ("tls-port", "0"),
    ("tls-cert-file", ""),
    ("tls-key-file", ""),
    ("tls-key-file-pass", ""),
    ("tls-client-cert-file", ""),
    ("tls-client-key-file", ""),
    ("tls-client-key-file-pass", ""),
    ("tls-ca-cert-file", ""),
    ("tls-ca-cert-dir", ""),
    ("tls-auth-clients", "yes"),
    ("tls-protocols", ""),
    ("tls-ciphers", ""),
    ("tls-ciphersuites", ""),
    ("tls-prefer-server-ciphers", "no"),
    ("tls-session-caching", "yes"),
    ("tls-session-cache-size", "20480"),
    ("tls-session-cache-timeout", "300"),
    ("tls-replication", "no"),
    ("tls-cluster", "no"),
    ("metrics-port", "0"),
    ("notify-keyspace-events", "\"\""),
    ("tracking-table-max-keys", "1000000"),
    ("stream-node-max-bytes", "4096"),
    ("stream-node-max-entries", "100"),
    ("slowlog-log-slower-than", "10000"),
    ("slowlog-max-len", "128"),
    ("latency-monitor-threshold", "0"),
    ("latency-tracking", "yes"),
    ("latency-tracking-info-percentiles", "50 99 99.9"),
    ("enable-debug-command", "no"),
    ("enable-module-command", "no"),
    ("enable-protected-configs", "no"),
    ("daemonize", "no"),
    ("pidfile", ""),
    ("set-proc-title", "yes"),
    ("disable-thp", "yes"),
    ("cluster-enabled", ""),
    ("maxmemory-clients", "0"),
];

/// The server's own list of settings (what `--check-config` prints) is the
/// contract: a setting added to the server must be documented here too.
#[test]
fn settings_contract_is_the_servers() {
    let out = Command::new(env!("CARGO_BIN_EXE_corekv")).arg("--check-config").output().unwrap();
    assert!(out.status.success());
    let server: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let documented: BTreeSet<String> = SETTINGS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(server, documented, "server settings vs deploy/corekv.conf's contract");
}

/// The example's directives: (name, value, commented out), each the line
/// after its "# Default:" line, checked to be documented that way.
fn example_directives() -> Vec<(String, String, bool)> {
    let text = read(&deploy("corekv.conf"));
    let lines: Vec<&str> = text.lines().collect();
    let mut directives = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        // Every active line is a documented directive.
        assert!(
            i > 0 && lines[i - 1].starts_with("# Default: "),
            "corekv.conf line {}: {line:?} does not follow a \"# Default:\" line",
            i + 1
        );
    }
    for (i, line) in lines.iter().enumerate() {
        let Some(default) = line.strip_prefix("# Default: ") else {
            continue;
        };
        let next = lines.get(i + 1).copied().unwrap_or("");
        let (directive, commented) = match next.strip_prefix("# ") {
            Some(d) => (d, true),
            None => (next, false),
        };
        let (name, value) = directive.split_once(' ').unwrap_or((directive, ""));
        assert!(!name.is_empty(), "corekv.conf line {}: no directive after \"# Default:\"", i + 2);
        if !commented {
            assert_eq!(default, value, "corekv.conf: {name} is set to something other than its default");
        }
        directives.push((name.to_string(), value.to_string(), commented));
    }
    directives
}

#[test]
fn example_config_documents_every_setting() {
    let directives = example_directives();
    let names: Vec<&str> = directives.iter().map(|(n, _, _)| n.as_str()).collect();
    let contract: Vec<&str> = SETTINGS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names.iter().copied().collect::<BTreeSet<_>>(),
        contract.iter().copied().collect::<BTreeSet<_>>(),
        "corekv.conf documents exactly the server's settings"
    );
    assert_eq!(names.len(), contract.len(), "each setting once");
    for (name, default) in SETTINGS {
        let (_, value, commented) = directives.iter().find(|(n, _, _)| n == name).unwrap();
        if default.is_empty() {
            assert!(commented, "{name} has no fixed default: show it commented out");
        } else {
            assert!(!commented, "{name} shows its default as an active line");
            assert_eq!(value, default, "{name}");
        }
    }
}

/// `corekv --check-config` parses a config exactly as a start would, so the
/// shipped example must pass, with the unit's own arguments.
#[test]
fn example_config_passes_check_config() {
    let unit = read(&deploy("corekv.service"));
    let exec = unit_values(&unit, "ExecStart");
    let args: Vec<&str> = exec[0].split_whitespace().collect();
    assert_eq!(args, ["/usr/local/bin/corekv", "/etc/corekv/corekv.conf"]);
    let check = |config: &Path, extra: &[&str]| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_corekv")).arg("--check-config").arg(config).args(extra).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), text)
    };

    let (ok, stdout, text) = check(&deploy("corekv.conf"), &[]);
    assert!(ok, "corekv --check-config deploy/corekv.conf:\n{text}");
    // It prints the effective config: every active directive is in it.
    for (name, _, commented) in example_directives() {
        if !commented {
            assert!(
                stdout.lines().any(|l| l.split_whitespace().next() == Some(name.as_str())),
                "effective config lacks {name}:\n{stdout}"
            );
        }
    }
    // Options after the file win, as on a real start.
    let (ok, stdout, text) = check(&deploy("corekv.conf"), &["--port", "7000"]);
    assert!(ok, "{text}");
    assert!(stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["port", "7000"]), "{stdout}");

    // A bad line is named.
    let tmp = TempDir::new("check-config");
    let bad = tmp.0.join("bad.conf");
    fs::write(&bad, "# comment\nbind 127.0.0.1\nport notaport\n").unwrap();
    let (ok, _, text) = check(&bad, &[]);
    assert!(!ok, "port notaport must be rejected:\n{text}");
    assert!(text.contains("notaport") || text.contains("line 3"), "the error names the bad line:\n{text}");
}
