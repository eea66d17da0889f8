//! The functions and predefined handles of Open MPI's library, looked up by name. In Open
//! MPI's ABI a handle is the address of a global (`MPI_COMM_WORLD` is `&ompi_mpi_comm_world`),
//! so the handles are those symbols' addresses.

use std::ffi::{c_char, c_int, c_void};

use crate::{MpiError, c_string};

pub(crate) type Handle = *mut c_void;

/// Open MPI's `MPI_Status` (`struct ompi_status_public_t`): the standard's three fields, then
/// two of its own.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Status {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    cancelled: c_int,
    ucount: usize,
}

type InitThread =
    unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
type CommQuery = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
type Bcast = unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, Handle) -> c_int;
type Allgather =
    unsafe extern "C" fn(*const c_void, c_int, Handle, *mut c_void, c_int, Handle, Handle) -> c_int;
type Allgatherv = unsafe extern "C" fn(
    *const c_void,
    c_int,
    Handle,
    *mut c_void,
    *const c_int,
    *const c_int,
    Handle,
    Handle,
) -> c_int;
type Gatherv = unsafe extern "C" fn(
    *const c_void,
    c_int,
    Handle,
    *mut c_void,
    *const c_int,
    *const c_int,
    Handle,
    c_int,
    Handle,
) -> c_int;
type Barrier = unsafe extern "C" fn(Handle) -> c_int;
type Isend =
    unsafe extern "C" fn(*const c_void, c_int, Handle, c_int, c_int, Handle, *mut Handle) -> c_int;
type Test = unsafe extern "C" fn(*mut Handle, *mut c_int, *mut Status) -> c_int;
type Wait = unsafe extern "C" fn(*mut Handle, *mut Status) -> c_int;
type Probe = unsafe extern "C" fn(c_int, c_int, Handle, *mut Status) -> c_int;
type GetCount = unsafe extern "C" fn(*const Status, Handle, *mut c_int) -> c_int;
type Recv =
    unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, c_int, Handle, *mut Status) -> c_int;
type Abort = unsafe extern "C" fn(Handle, c_int) -> c_int;
type Finalize = unsafe extern "C" fn() -> c_int;

pub(crate) struct Symbols {
    pub init_thread: InitThread,
    pub comm_rank: CommQuery,
    pub comm_size: CommQuery,
    pub bcast: Bcast,
    pub allgather: Allgather,
    pub allgatherv: Allgatherv,
    pub gatherv: Gatherv,
    pub barrier: Barrier,
    pub isend: Isend,
    pub test: Test,
    pub wait: Wait,
    pub probe: Probe,
    pub get_count: GetCount,
    pub recv: Recv,
    pub abort: Abort,
    pub finalize: Finalize,
    pub world: Handle,
    pub byte: Handle,
    pub float: Handle,
}

// SAFETY: the handles are addresses of Open MPI's process-wide predefined objects, valid for
// the process's life; the library is initialised with MPI_THREAD_MULTIPLE, so any thread may
// call it.
unsafe impl Send for Symbols {}
unsafe impl Sync for Symbols {}

impl Symbols {
    pub(crate) fn open(library: &str) -> Result<Self, MpiError> {
        let name = c_string(library);
        // SAFETY: a valid C string. RTLD_GLOBAL: Open MPI's plugins, which it opens itself,
        // resolve their references to libmpi through the global namespace.
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if lib.is_null() {
            return Err(MpiError::Library {
                library: library.to_owned(),
                reason: dl_error(),
            });
        }
        let sym = |name: &str| -> Result<*mut c_void, MpiError> {
            let c = c_string(name);
            // SAFETY: `lib` is an open handle (never closed) and `c` a valid C string.
            let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
            if p.is_null() {
                Err(MpiError::Symbol(name.to_owned()))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is the function of the MPI standard's C binding of that name,
        // whose signature the field's type spells out (Open MPI 4.x, handles as pointers).
        unsafe {
            Ok(Self {
                init_thread: std::mem::transmute::<*mut c_void, InitThread>(sym(
                    "MPI_Init_thread",
                )?),
                comm_rank: std::mem::transmute::<*mut c_void, CommQuery>(sym("MPI_Comm_rank")?),
                comm_size: std::mem::transmute::<*mut c_void, CommQuery>(sym("MPI_Comm_size")?),
                bcast: std::mem::transmute::<*mut c_void, Bcast>(sym("MPI_Bcast")?),
                allgather: std::mem::transmute::<*mut c_void, Allgather>(sym("MPI_Allgather")?),
                allgatherv: std::mem::transmute::<*mut c_void, Allgatherv>(sym("MPI_Allgatherv")?),
                gatherv: std::mem::transmute::<*mut c_void, Gatherv>(sym("MPI_Gatherv")?),
                barrier: std::mem::transmute::<*mut c_void, Barrier>(sym("MPI_Barrier")?),
                isend: std::mem::transmute::<*mut c_void, Isend>(sym("MPI_Isend")?),
                test: std::mem::transmute::<*mut c_void, Test>(sym("MPI_Test")?),
                wait: std::mem::transmute::<*mut c_void, Wait>(sym("MPI_Wait")?),
                probe: std::mem::transmute::<*mut c_void, Probe>(sym("MPI_Probe")?),
                get_count: std::mem::transmute::<*mut c_void, GetCount>(sym("MPI_Get_count")?),
                recv: std::mem::transmute::<*mut c_void, Recv>(sym("MPI_Recv")?),
                abort: std::mem::transmute::<*mut c_void, Abort>(sym("MPI_Abort")?),
                finalize: std::mem::transmute::<*mut c_void, Finalize>(sym("MPI_Finalize")?),
                world: sym("ompi_mpi_comm_world")?,
                byte: sym("ompi_mpi_byte")?,
                float: sym("ompi_mpi_float")?,
            })
        }
    }
}

/// `dlerror`'s message.
fn dl_error() -> String {
    // SAFETY: dlerror returns null or a valid C string owned by the loader.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown error".to_owned();
    }
    // SAFETY: non-null, NUL-terminated (above).
    unsafe { std::ffi::CStr::from_ptr(e) }
        .to_string_lossy()
        .into_owned()
}
