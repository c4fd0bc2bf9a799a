import Foundation
import Glibc
import SocketCore

// Helpers shared by several test targets. Each file here serves one kind of check.

/// The number of this process's descriptors that are TCP sockets with `port` at either end,
/// including sockets still connecting to it.
///
/// Counting only these, rather than all of `/proc/self/fd`, keeps the check exact while other
/// tests in the process open and close descriptors of their own. Each socket is asked for its
/// addresses directly: `/proc/net/tcp` is no help here, since with tens of thousands of TIME_WAIT
/// entries on a busy machine it is read in chunks that can skip lines while the table changes.
/// The peer is read with `SO_PEERNAME`, which (unlike `getpeername`) also answers for a socket
/// whose connect is still in progress, so a connect left behind is counted too.
public func socketDescriptors(port: Int) throws -> Int {
    let entries = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
    return entries.compactMap(Int32.init).filter { descriptor in
        let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)")
        guard link?.hasPrefix("socket:[") == true else { return false }
        return socketAddressPort(of: descriptor, getsockname) == port || socketAddressPort(of: descriptor, peerName) == port
    }.count
}

/// The kernel identities (`socket:[inode]`) of this process's sockets listening on `port`.
///
/// Unlike a port, an identity is never handed to another socket while this one lives, so a test
/// can follow one socket while other tests open sockets on the same port once it is free.
public func listeningSocketIdentities(port: Int) throws -> Set<String> {
    let entries = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
    return Set(entries.compactMap(Int32.init).compactMap { descriptor -> String? in
        let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)")
        guard let link, link.hasPrefix("socket:["), socketAddressPort(of: descriptor, getsockname) == port else { return nil }
        var listening: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(descriptor, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0, listening != 0 else { return nil }
        return link
    })
}

/// The kernel identities (`socket:[inode]`) of every socket this process holds open.
public func openSocketIdentities() throws -> Set<String> {
    let entries = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
    return Set(entries.compactMap { entry -> String? in
        let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)")
        return link?.hasPrefix("socket:[") == true ? link : nil
    })
}

/// `getpeername` through `getsockopt(SO_PEERNAME)`: the address a socket is connected, or still
/// connecting, to.
private func peerName(
    _ descriptor: Int32, _ address: UnsafeMutablePointer<sockaddr>, _ length: UnsafeMutablePointer<socklen_t>
) -> Int32 {
    // SO_PEERNAME refuses (EINVAL) a buffer longer than the address, so ask for exactly the size
    // of the socket's own address, which getsockname reports.
    guard getsockname(descriptor, address, length) == 0 else { return -1 }
    return getsockopt(descriptor, SOL_SOCKET, SO_PEERNAME, address, length)
}
/// The port of `descriptor`'s local (`getsockname`) or remote (`getpeername`) address, if it is an
/// IPv4 or IPv6 socket with one.
public func socketAddressPort(
    of descriptor: Int32, _ call: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
) -> Int? {
    var storage = sockaddr_storage()
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    return withUnsafeMutablePointer(to: &storage) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address -> Int? in
            guard call(descriptor, address, &length) == 0 else { return nil }
            let family = Int32(address.pointee.sa_family)
            guard family == AF_INET || family == AF_INET6 else { return nil }
            return SocketAddress(address, length: length).port
        }
    }
}
