//! Open MPI, loaded with `dlopen` when a process is started by `mpirun` and asked to use it:
//! the rank and size of the job, the few collectives a tensor-parallel group needs
//! (broadcast, gathers, barrier, abort) and the ordered messages of a pipeline's stages. Opened at run time so that pagoda builds and runs
//! without MPI installed; only Open MPI's ABI (Debian's `libopenmpi3`, libmpi.so.40) is known.

mod symbols;

use std::ffi::{CString, c_int, c_void};
use std::sync::{Mutex, OnceLock};

use symbols::{Handle, Status, Symbols};

/// Why MPI could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MpiError {
    #[error(
        "cannot open Open MPI's library ({library}): {reason}; install it (Debian: apt-get install openmpi-bin) and start pagoda under mpirun"
    )]
    Library { library: String, reason: String },
    #[error("Open MPI's library lacks `{0}`")]
    Symbol(String),
    #[error("not started by mpirun (no OMPI_COMM_WORLD_SIZE in the environment)")]
    NoLauncher,
    #[error("MPI_Init_thread failed with code {0}")]
    Init(c_int),
    #[error("MPI gives only thread level {0}; pagoda needs MPI_THREAD_MULTIPLE (3)")]
    ThreadLevel(c_int),
    #[error("{call} failed with code {code}")]
    Call { call: &'static str, code: c_int },
    #[error("{what} of {len} is more than MPI's count type holds")]
    TooLarge { what: &'static str, len: usize },
}

/// The library Debian's `libopenmpi3` installs.
pub const LIBRARY: &str = "libmpi.so.40";
/// `MPI_THREAD_MULTIPLE` in Open MPI's `mpi.h`.
const THREAD_MULTIPLE: c_int = 3;

/// The initialised MPI of this process (MPI may be initialised once per process).
pub struct Mpi {
    s: Symbols,
    rank: usize,
    size: usize,
    /// Sends still in flight, each with the buffer MPI reads from until it completes.
    sending: Mutex<Vec<Sending>>,
}

struct Sending {
    request: Handle,
    _data: Vec<f32>,
}

// SAFETY: a request handle is Open MPI's pointer to its own request object, usable from any
// thread under MPI_THREAD_MULTIPLE; it is only touched under the `sending` lock.
unsafe impl Send for Sending {}

static MPI: OnceLock<Result<Mpi, MpiError>> = OnceLock::new();

impl Mpi {
    /// Whether this process was started by Open MPI's `mpirun`.
    pub fn launched() -> bool {
        std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some()
    }

    /// Opens the library and initialises MPI (the first call), then returns it.
    pub fn init() -> Result<&'static Mpi, MpiError> {
        MPI.get_or_init(Self::open).as_ref().map_err(Clone::clone)
    }

    fn open() -> Result<Self, MpiError> {
        if !Self::launched() {
            return Err(MpiError::NoLauncher);
        }
        let s = Symbols::open(LIBRARY)?;
        let mut provided: c_int = 0;
        // SAFETY: called once per process (the OnceLock), with null argc/argv as the standard
        // allows, and a valid out-pointer.
        let code = unsafe {
            (s.init_thread)(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                THREAD_MULTIPLE,
                &mut provided,
            )
        };
        if code != 0 {
            return Err(MpiError::Init(code));
        }
        if provided < THREAD_MULTIPLE {
            return Err(MpiError::ThreadLevel(provided));
        }
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: MPI is initialised; out-pointers are valid.
        check("MPI_Comm_rank", unsafe {
            (s.comm_rank)(s.world, &mut rank)
        })?;
        check("MPI_Comm_size", unsafe {
            (s.comm_size)(s.world, &mut size)
        })?;
        Ok(Self {
            s,
            rank: rank.max(0) as usize,
            size: size.max(1) as usize,
            sending: Mutex::new(Vec::new()),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Rank `root`'s `bytes` on every rank: the length goes first, so the other ranks may
    /// pass any buffer (it is resized).
    pub fn broadcast(&self, bytes: &mut Vec<u8>, root: usize) -> Result<(), MpiError> {
        let mut len = [bytes.len() as u64];
        self.bcast_raw(len.as_mut_ptr().cast(), 8, root)?;
        bytes.resize(usize::try_from(len[0]).unwrap_or(usize::MAX), 0);
        let n = count("a broadcast", bytes.len())?;
        self.bcast_raw(bytes.as_mut_ptr().cast(), n, root)
    }

    fn bcast_raw(&self, buf: *mut c_void, n: c_int, root: usize) -> Result<(), MpiError> {
        // SAFETY: `buf` holds `n` bytes on every rank (the caller sized it); root is a rank.
        check("MPI_Bcast", unsafe {
            (self.s.bcast)(buf, n, self.s.byte, root as c_int, self.s.world)
        })
    }

    /// Every rank's `part` (lengths may differ), concatenated in rank order into `out`
    /// (resized).
    pub fn all_gather_f32(&self, part: &[f32], out: &mut Vec<f32>) -> Result<(), MpiError> {
        let counts = self.all_lengths(part.len())?;
        let (counts, displs) = layout(&counts)?;
        out.resize(counts.iter().map(|&c| c as usize).sum(), 0.0);
        // SAFETY: `part` holds counts[rank] floats and `out` their sum, laid out by `displs`.
        check("MPI_Allgatherv", unsafe {
            (self.s.allgatherv)(
                part.as_ptr().cast(),
                count("an all-gather part", part.len())?,
                self.s.float,
                out.as_mut_ptr().cast(),
                counts.as_ptr(),
                displs.as_ptr(),
                self.s.float,
                self.s.world,
            )
        })
    }

    /// Every rank's `part`, all of one length, concatenated in rank order into `out`
    /// (resized): one MPI_Allgather, with no exchange of lengths first (an all-reduce's parts).
    pub fn all_gather_equal_f32(&self, part: &[f32], out: &mut Vec<f32>) -> Result<(), MpiError> {
        let n = count("an all-gather part", part.len())?;
        out.resize(part.len() * self.size, 0.0);
        // SAFETY: every rank sends `n` floats; `out` holds `size` x `n`.
        unsafe {
            self.allgather(
                part.as_ptr().cast(),
                n,
                self.s.float,
                out.as_mut_ptr().cast(),
            )
        }
    }

    /// MPI_Allgather of `n` elements of `datatype` from every rank, into `recv` in rank order.
    ///
    /// # Safety
    /// `send` must hold `n` elements and `recv` `size` x `n` elements of `datatype`.
    unsafe fn allgather(
        &self,
        send: *const c_void,
        n: c_int,
        datatype: Handle,
        recv: *mut c_void,
    ) -> Result<(), MpiError> {
        // SAFETY: the caller's promise on the buffers; the rest is this library's handles.
        check("MPI_Allgather", unsafe {
            (self.s.allgather)(send, n, datatype, recv, n, datatype, self.s.world)
        })
    }

    /// Every rank's `part` of bytes at `root` (in rank order); `None` on the other ranks.
    pub fn gather_bytes(&self, part: &[u8], root: usize) -> Result<Option<Vec<Vec<u8>>>, MpiError> {
        let counts = self.all_lengths(part.len())?;
        let (counts, displs) = layout(&counts)?;
        let mut out = vec![0u8; counts.iter().map(|&c| c as usize).sum()];
        // SAFETY: `part` holds counts[rank] bytes; `out` holds their sum (read at the root only).
        check("MPI_Gatherv", unsafe {
            (self.s.gatherv)(
                part.as_ptr().cast(),
                count("a gather part", part.len())?,
                self.s.byte,
                out.as_mut_ptr().cast(),
                counts.as_ptr(),
                displs.as_ptr(),
                self.s.byte,
                root as c_int,
                self.s.world,
            )
        })?;
        if self.rank != root {
            return Ok(None);
        }
        Ok(Some(
            counts
                .iter()
                .zip(&displs)
                .map(|(&c, &d)| out[d as usize..][..c as usize].to_vec())
                .collect(),
        ))
    }

    /// Each rank's `len`, in rank order, on every rank.
    fn all_lengths(&self, len: usize) -> Result<Vec<u64>, MpiError> {
        let mine = [len as u64];
        let mut all = vec![0u64; self.size];
        // SAFETY: 8 bytes from each rank into `size` x 8 bytes.
        unsafe {
            self.allgather(
                mine.as_ptr().cast(),
                8,
                self.s.byte,
                all.as_mut_ptr().cast(),
            )
        }?;
        Ok(all)
    }

    /// Sends `data` to rank `to` without waiting for it to be received (MPI_Isend; the buffer
    /// is kept until MPI is done with it). Messages from one rank to another with the same
    /// `tag` arrive in the order they were sent.
    pub fn send_f32(&self, data: Vec<f32>, to: usize, tag: i32) -> Result<(), MpiError> {
        let n = count("a message", data.len())?;
        let mut sending = self.sending.lock().unwrap_or_else(|e| e.into_inner());
        self.reap(&mut sending)?;
        let mut request: Handle = std::ptr::null_mut();
        // SAFETY: `data`'s heap buffer stays where it is, owned by `sending`, until MPI_Test or
        // MPI_Wait says the send is complete.
        check("MPI_Isend", unsafe {
            (self.s.isend)(
                data.as_ptr().cast(),
                n,
                self.s.float,
                to as c_int,
                tag,
                self.s.world,
                &mut request,
            )
        })?;
        sending.push(Sending {
            request,
            _data: data,
        });
        Ok(())
    }

    /// The next message from rank `from` with `tag`, waiting for it.
    pub fn recv_f32(&self, from: usize, tag: i32) -> Result<Vec<f32>, MpiError> {
        let mut status = Status::default();
        // SAFETY: valid out-pointers; the buffer is sized from the probed message.
        check("MPI_Probe", unsafe {
            (self.s.probe)(from as c_int, tag, self.s.world, &mut status)
        })?;
        let mut n: c_int = 0;
        check("MPI_Get_count", unsafe {
            (self.s.get_count)(&status, self.s.float, &mut n)
        })?;
        let mut data = vec![0f32; n.max(0) as usize];
        check("MPI_Recv", unsafe {
            (self.s.recv)(
                data.as_mut_ptr().cast(),
                n.max(0),
                self.s.float,
                from as c_int,
                tag,
                self.s.world,
                &mut status,
            )
        })?;
        Ok(data)
    }

    /// Drops the sends MPI has completed.
    fn reap(&self, sending: &mut Vec<Sending>) -> Result<(), MpiError> {
        let mut result = Ok(());
        sending.retain_mut(|s| {
            let mut done: c_int = 0;
            // SAFETY: a live request from MPI_Isend; MPI_STATUS_IGNORE is a null pointer.
            let code = unsafe { (self.s.test)(&mut s.request, &mut done, std::ptr::null_mut()) };
            if code != 0 {
                result = check("MPI_Test", code);
            }
            done == 0
        });
        result
    }

    /// Waits for every send in flight (before finalizing).
    fn wait_sends(&self) -> Result<(), MpiError> {
        let mut sending = self.sending.lock().unwrap_or_else(|e| e.into_inner());
        for mut s in sending.drain(..) {
            // SAFETY: a live request from MPI_Isend.
            check("MPI_Wait", unsafe {
                (self.s.wait)(&mut s.request, std::ptr::null_mut())
            })?;
        }
        Ok(())
    }

    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<(), MpiError> {
        // SAFETY: MPI is initialised.
        check("MPI_Barrier", unsafe { (self.s.barrier)(self.s.world) })
    }

    /// Ends every process of the job (a rank failed mid-collective: the others would wait
    /// for it forever). `mpirun` reports it and exits non-zero.
    pub fn abort(&self, code: i32) -> ! {
        // SAFETY: MPI is initialised; MPI_Abort does not return on success.
        unsafe { (self.s.abort)(self.s.world, code) };
        std::process::exit(code)
    }

    /// Shuts MPI down; every rank calls it once, after its last collective.
    pub fn finalize(&self) -> Result<(), MpiError> {
        self.wait_sends()?;
        // SAFETY: MPI is initialised, and no other call follows on this process.
        check("MPI_Finalize", unsafe { (self.s.finalize)() })
    }
}

fn check(call: &'static str, code: c_int) -> Result<(), MpiError> {
    if code == 0 {
        Ok(())
    } else {
        Err(MpiError::Call { call, code })
    }
}

fn count(what: &'static str, len: usize) -> Result<c_int, MpiError> {
    c_int::try_from(len).map_err(|_| MpiError::TooLarge { what, len })
}

/// Counts and displacements of a variable gather.
fn layout(lengths: &[u64]) -> Result<(Vec<c_int>, Vec<c_int>), MpiError> {
    let mut counts = Vec::with_capacity(lengths.len());
    let mut displs = Vec::with_capacity(lengths.len());
    let mut at = 0usize;
    for &l in lengths {
        let l = usize::try_from(l).unwrap_or(usize::MAX);
        counts.push(count("a gathered part", l)?);
        displs.push(count("a gather", at)?);
        at = at.saturating_add(l);
    }
    count("a gather", at)?;
    Ok((counts, displs))
}

/// The C string of `s` (library and symbol names have no NUL).
fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn gathers_lay_parts_end_to_end() {
        let (c, d) = layout(&[3, 0, 5]).unwrap();
        assert_eq!((c, d), (vec![3, 0, 5], vec![0, 3, 3]));
        assert!(matches!(
            layout(&[u64::from(u32::MAX)]),
            Err(MpiError::TooLarge { .. })
        ));
    }

    #[test]
    fn without_mpirun_it_says_so() {
        if !Mpi::launched() {
            assert_eq!(Mpi::init().err(), Some(MpiError::NoLauncher));
        }
    }
}
