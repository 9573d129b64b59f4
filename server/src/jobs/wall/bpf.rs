//! The cgroup v2 device filter: a `BPF_PROG_TYPE_CGROUP_DEVICE` program, assembled here from a
//! list of character devices to refuse, and attached to a job's cgroup. The kernel runs it on
//! every open (and mknod) of a device file by a process in the cgroup; it returns 0 (refuse) for
//! the listed devices and 1 (allow) for everything else. This is what runc and crun do for
//! containers, and what Slurm's `ConstrainDevices` does on cgroup v2; the program is a few
//! dozen instructions, so it is assembled by hand rather than through an eBPF toolchain.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Insn {
    code: u8,
    /// dst in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const BPF_LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const BPF_ALU64_AND_K: u8 = 0x57; // BPF_ALU64 | BPF_AND | BPF_K
const BPF_JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const BPF_MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const BPF_EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

/// `bpf_cgroup_dev_ctx.access_type & 0xffff`: a character device.
const BPF_DEVCG_DEV_CHAR: i32 = 2;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_PROG_LOAD: i64 = 5;
const BPF_PROG_ATTACH: i64 = 8;
const BPF_F_ALLOW_MULTI: u32 = 2;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

/// The program refusing the character devices `deny` (major, minor) and allowing all else.
///
/// ```text
///   r2 = ctx->access_type; r2 &= 0xffff     (the device type)
///   r3 = ctx->major; r4 = ctx->minor
///   if r2 != CHAR goto allow
///   for each (major, minor): if r3 == major && r4 == minor: return 0
/// allow:
///   return 1
/// ```
fn program(deny: &[(u32, u32)]) -> Vec<Insn> {
    let mut code = vec![
        insn(BPF_LDX_MEM_W, 2, 1, 0, 0),
        insn(BPF_ALU64_AND_K, 2, 0, 0, 0xffff),
        insn(BPF_LDX_MEM_W, 3, 1, 4, 0),
        insn(BPF_LDX_MEM_W, 4, 1, 8, 0),
    ];
    // Each refused device takes four instructions; the type check skips them all.
    let skip = i16::try_from(deny.len() * 4).unwrap_or(i16::MAX);
    code.push(insn(BPF_JNE_K, 2, 0, skip, BPF_DEVCG_DEV_CHAR));
    for &(major, minor) in deny {
        code.extend([
            insn(BPF_JNE_K, 3, 0, 3, major as i32),
            insn(BPF_JNE_K, 4, 0, 2, minor as i32),
            insn(BPF_MOV64_K, 0, 0, 0, 0),
            insn(BPF_EXIT, 0, 0, 0, 0),
        ]);
    }
    code.extend([insn(BPF_MOV64_K, 0, 0, 0, 1), insn(BPF_EXIT, 0, 0, 0, 0)]);
    code
}

/// `union bpf_attr` for `BPF_PROG_LOAD`, as far as it is used, padded to the size the kernel
/// reads (it checks that bytes beyond what it knows are zero).
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    _rest: [u64; 12],
}

#[repr(C)]
#[derive(Default)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
    _rest: [u32; 11],
}

fn bpf<T>(command: i64, attr: &mut T) -> std::io::Result<i64> {
    // SAFETY: `attr` is a live, fully initialised `repr(C)` value of the size passed.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_bpf,
            command,
            attr as *mut T as *mut nix::libc::c_void,
            std::mem::size_of::<T>(),
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Loads the filter for `deny` and attaches it to the cgroup open as `cgroup` (a directory).
/// The attachment lives as long as the cgroup; the program's own descriptor is closed here.
pub fn attach_filter(cgroup: &impl AsRawFd, deny: &[(u32, u32)]) -> std::io::Result<()> {
    let code = program(deny);
    let license = c"GPL";
    let mut log = vec![0u8; 4096];
    let mut load = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: code.len() as u32,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        expected_attach_type: BPF_CGROUP_DEVICE,
        ..Default::default()
    };
    load.prog_name[..10].copy_from_slice(b"lanes_wall");
    let fd = bpf(BPF_PROG_LOAD, &mut load).map_err(|e| {
        let text = String::from_utf8_lossy(&log);
        let text = text.trim_end_matches('\0').trim();
        if text.is_empty() {
            e
        } else {
            std::io::Error::new(e.kind(), format!("{e}; verifier: {text}"))
        }
    })?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    let program = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut attach = ProgAttach {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: program.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        // Beside any filter a container runtime put above us: every one must allow.
        attach_flags: BPF_F_ALLOW_MULTI,
        ..Default::default()
    };
    match bpf(BPF_PROG_ATTACH, &mut attach) {
        Ok(_) => Ok(()),
        // A parent's filter attached without ALLOW_MULTI admits only a plain attach below it.
        Err(e) if e.raw_os_error() == Some(nix::libc::EPERM) => {
            attach.attach_flags = 0;
            bpf(BPF_PROG_ATTACH, &mut attach).map(|_| ())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_checks_the_type_once_then_each_refused_device_and_allows_the_rest() {
        let code = program(&[(195, 0), (195, 2)]);
        assert_eq!(code.len(), 4 + 1 + 2 * 4 + 2);
        // The type check jumps over both refusals, onto "return 1".
        assert_eq!(code[4].off, 8);
        assert_eq!(code[4 + 1 + 8], insn(BPF_MOV64_K, 0, 0, 0, 1));
        assert_eq!((code[5].imm, code[6].imm), (195, 0));
        assert_eq!((code[9].imm, code[10].imm), (195, 2));
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
