import Glibc

/// The outcome of a non-blocking system call that may have nothing to do right now.
public enum IOResult<Value> {
    /// The call did its work and returned this value.
    case done(Value)
    /// The call would have blocked (`EAGAIN` / `EWOULDBLOCK` / `EINPROGRESS` where asked).
    case wouldBlock
}

/// Runs `body` until it stops failing with `EINTR`; `-1` with another `errno` becomes a `SocketError`.
///
/// Every socket call of this module goes through here so that signals never surface as errors.
/// `EBADF` and `EFAULT` mean the program itself is broken (a descriptor used after close, a bad
/// pointer), so they trap instead of travelling on as ordinary errors.
@inlinable
package func retryingInterrupts<T: BinaryInteger>(
    _ operation: String, target: String = "", _ body: () -> T
) throws(SocketError) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        precondition(code != EBADF && code != EFAULT, "\(operation) on a bad descriptor or pointer (errno \(code))")
        throw SocketError(.posix(code), operation: operation, target: target)
    }
}

/// Like `retryingInterrupts`, but `EAGAIN` / `EWOULDBLOCK` become `.wouldBlock` instead of an error.
@inlinable
package func retryingInterruptsNonBlocking<T: BinaryInteger>(
    _ operation: String, target: String = "", _ body: () -> T
) throws(SocketError) -> IOResult<T> {
    do {
        return .done(try retryingInterrupts(operation, target: target, body))
    } catch {
        if error.errno == EAGAIN || error.errno == EWOULDBLOCK { return .wouldBlock }
        throw error
    }
}
