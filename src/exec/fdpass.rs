//! File descriptors from a runner to the harness, over a Unix socket (`SCM_RIGHTS`).
//!
//! A runner exports each of its buffers as a file descriptor (the CUDA VMM API) and sends
//! them to the harness's [`FdInbox`]: an abstract-namespace socket with a random name that
//! the harness gives the runner in its environment. The inbox takes a connection only from
//! a process of the same user, and only while it waits for one.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

use super::secret::fresh_secret;

/// The environment variable that gives a runner its harness's inbox.
pub(crate) const INBOX_ENV: &str = "CUDAPERF_FD_INBOX";

/// Descriptors per message (the kernel caps one message at 253).
const PER_MESSAGE: usize = 32;

/// Where a runner's file descriptors arrive (harness side).
pub(crate) struct FdInbox {
    listener: UnixListener,
    name: String,
}

impl FdInbox {
    /// A new inbox under a fresh random name.
    pub fn new() -> io::Result<FdInbox> {
        let name = format!(
            "cudaperf-fd-{}-{:016x}{:016x}",
            std::process::id(),
            fresh_secret(),
            fresh_secret()
        );
        let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
        listener.set_nonblocking(true)?;
        Ok(FdInbox { listener, name })
    }

    /// The name a runner connects to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads `count` descriptors sent with `token` (within `limit`). Connections that
    /// carry another token (left by a runner that was killed mid-send) are dropped.
    pub fn receive(&self, token: u64, count: usize, limit: Duration) -> io::Result<Vec<OwnedFd>> {
        let deadline = Instant::now() + limit;
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "no runner sent descriptors to {} within {limit:?}",
                                self.name
                            ),
                        ));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                Err(e) => return Err(e),
            };
            stream.set_nonblocking(false)?;
            let left = deadline.saturating_duration_since(Instant::now());
            stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            let uid = peer_uid(&stream)?;
            // SAFETY: getuid cannot fail.
            if uid != unsafe { libc::getuid() } {
                continue;
            }
            let mut fds = Vec::with_capacity(count);
            let mut stale = false;
            while fds.len() < count {
                let (sent_with, got) = recv_message(&stream, PER_MESSAGE.min(count - fds.len()))?;
                if sent_with != Some(token) {
                    if fds.is_empty() {
                        // Another request's connection, or one closed before it sent.
                        stale = true;
                        break;
                    }
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the runner sent {} of {count} descriptors", fds.len()),
                    ));
                }
                fds.extend(got);
            }
            if !stale {
                return Ok(fds);
            }
        }
    }
}

/// Sends `fds` to the inbox called `name` (runner side), in order, each message marked
/// with `token` (the harness's per-request number).
pub(crate) fn send_fds(name: &str, token: u64, fds: &[BorrowedFd]) -> io::Result<()> {
    let stream = UnixStream::connect_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
    for chunk in fds.chunks(PER_MESSAGE) {
        let raw: Vec<RawFd> = chunk.iter().map(|f| f.as_raw_fd()).collect();
        send_message(&stream, token, &raw)?;
    }
    Ok(())
}

fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: out-parameters of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// A message header over one data buffer and a control buffer of `space` bytes (`control`
/// must hold at least that many, 8-byte aligned); both must outlive the header's use.
fn header(iov: &mut libc::iovec, control: &mut [u64], space: usize) -> libc::msghdr {
    // SAFETY: a zeroed msghdr is valid; the pointers set below are the caller's buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    msg
}

/// Control-buffer bytes for `fds` descriptors, and a buffer that holds them.
fn control_for(fds: usize) -> (usize, Vec<u64>) {
    let data_len = (fds * std::mem::size_of::<RawFd>()) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
    (space, vec![0u64; space.div_ceil(8)])
}

fn send_message(stream: &UnixStream, token: u64, fds: &[RawFd]) -> io::Result<()> {
    let mut data = token.to_le_bytes();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let (space, mut control) = control_for(fds.len());
    let msg = header(&mut iov, &mut control, space);
    // SAFETY: the control buffer holds one header of CMSG_LEN(bytes of fds).
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
    }
    // SAFETY: msg points at live buffers of the sizes it states.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One message: its token (`None` at the end of the stream) and its descriptors.
fn recv_message(stream: &UnixStream, most: usize) -> io::Result<(Option<u64>, Vec<OwnedFd>)> {
    let mut data = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let (space, mut control) = control_for(most);
    let mut msg = header(&mut iov, &mut control, space);
    // SAFETY: msg points at live buffers of the sizes it states.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    // SAFETY: walks the control messages the kernel wrote, within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for k in 0..bytes / std::mem::size_of::<RawFd>() {
                    out.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(k))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("descriptors were cut off (MSG_CTRUNC)"));
    }
    Ok((
        (n as usize == data.len()).then(|| u64::from_le_bytes(data)),
        out,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    /// Files sent through the inbox arrive as descriptors of the same open files, in order.
    #[test]
    fn descriptors_arrive_in_order_and_open() {
        let inbox = FdInbox::new().expect("inbox");
        let files: Vec<std::fs::File> = (0..40)
            .map(|k| {
                let mut f = tempfile_with(&format!("file {k}"));
                f.rewind().unwrap();
                f
            })
            .collect();
        let name = inbox.name().to_string();
        let sender = std::thread::spawn(move || {
            let fds: Vec<BorrowedFd> = files.iter().map(|f| f.as_fd()).collect();
            send_fds(&name, 7, &fds)
        });
        let got = inbox
            .receive(7, 40, Duration::from_secs(10))
            .expect("receive");
        sender.join().unwrap().expect("send");
        assert_eq!(got.len(), 40);
        for (k, fd) in got.into_iter().enumerate() {
            let mut f = std::fs::File::from(fd);
            let mut text = String::new();
            f.read_to_string(&mut text).unwrap();
            assert_eq!(text, format!("file {k}"));
        }
    }

    #[test]
    fn nobody_connecting_is_a_timeout_not_a_hang() {
        let inbox = FdInbox::new().expect("inbox");
        let err = inbox.receive(1, 1, Duration::from_millis(50)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains(inbox.name()), "{err}");
    }

    #[test]
    fn a_sender_that_stops_short_is_an_error() {
        let inbox = FdInbox::new().expect("inbox");
        let f = tempfile_with("one");
        send_fds(inbox.name(), 3, &[f.as_fd()]).expect("send");
        let err = inbox.receive(3, 2, Duration::from_secs(5)).unwrap_err();
        assert!(err.to_string().contains("1 of 2"), "{err}");
    }

    /// What a runner killed after sending is never taken for the next request's answer.
    #[test]
    fn descriptors_sent_for_another_request_are_dropped() {
        let inbox = FdInbox::new().expect("inbox");
        let old = tempfile_with("old");
        let new = tempfile_with("new");
        send_fds(inbox.name(), 1, &[old.as_fd()]).expect("send stale");
        send_fds(inbox.name(), 2, &[new.as_fd()]).expect("send fresh");
        let got = inbox
            .receive(2, 1, Duration::from_secs(5))
            .expect("receive");
        let mut text = String::new();
        let mut f = std::fs::File::from(got.into_iter().next().unwrap());
        f.rewind().unwrap();
        f.read_to_string(&mut text).unwrap();
        assert_eq!(text, "new");
    }

    fn tempfile_with(text: &str) -> std::fs::File {
        let dir = std::env::temp_dir();
        let path = dir.join(format!(
            "cudaperf-fdpass-{}-{}",
            std::process::id(),
            text.replace(' ', "_")
        ));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
        let _ = std::fs::remove_file(&path);
        f
    }
}
