// Also compiled into the TLS fuzz target by Scripts/fuzz.sh (-D FUZZING, one module with
// the SocketTLS sources): no Testing, no imports of our modules outside `#if !FUZZING`.
#if !FUZZING
@testable import SocketTLS
#endif

/// A test CA, a server certificate it issued for localhost, 127.0.0.1 and ::1, and the contexts and
/// session pairs most tests start from.
final class TLSFixture {
    let pki = TestPKI()
    let ca: TestPKI.Identity
    let server: TestPKI.Identity

    init() {
        ca = pki.certificateAuthority("SocketTLS Test CA")
        server = pki.serverCertificate("server", issuedBy: ca)
    }

    /// A server context presenting `identity` (the fixture's server certificate by default).
    func serverContext(
        _ identity: TestPKI.Identity? = nil, minimum: TLSVersion = .v1_2, maximum: TLSVersion = .v1_3
    ) throws -> TLSContext {
        let identity = identity ?? server
        return try TLSContext(TLSConfiguration(
            role: .server(certificateChainFile: identity.certificateFile, privateKeyFile: identity.keyFile),
            minimumVersion: minimum, maximumVersion: maximum))
    }

    /// A client context trusting `trust` (the fixture's CA by default).
    func clientContext(
        trust: TLSTrust? = nil, minimum: TLSVersion = .v1_2, maximum: TLSVersion = .v1_3
    ) throws -> TLSContext {
        try TLSContext(TLSConfiguration(
            role: .client(trust: trust ?? .certificateAuthorities(file: ca.certificateFile)),
            minimumVersion: minimum, maximumVersion: maximum))
    }

    /// A client and a server session joined in memory; the client's ClientHello is already queued.
    func pair(
        server serverContext: TLSContext? = nil, client clientContext: TLSContext? = nil, serverName: String? = "localhost",
        chunkSizes: [Int] = [Int.max], readSizes: [Int] = [64 * 1024]
    ) throws -> SessionPair {
        let client = try (clientContext ?? self.clientContext()).makeClientSession(serverName: serverName, peerLabel: "server")
        let server = try (serverContext ?? self.serverContext()).makeServerSession(peerLabel: "client")
        return SessionPair(client: client, server: server, chunkSizes: chunkSizes, readSizes: readSizes)
    }
}

/// `count` bytes that differ from position to position (so a reordering or a repeat shows).
func patternBytes(_ count: Int, seed: UInt32 = 1) -> [UInt8] {
    var state = seed &* 2_654_435_761 | 1
    return (0..<count).map { _ in
        state ^= state << 13
        state ^= state >> 17
        state ^= state << 5
        return UInt8(truncatingIfNeeded: state)
    }
}

/// The content types of the TLS records in `ciphertext` (which must start at a record boundary);
/// `nil` if the bytes do not parse as whole records.
func recordTypes(_ ciphertext: [UInt8]) -> [UInt8]? {
    var types: [UInt8] = []
    var offset = 0
    while offset < ciphertext.count {
        guard offset + 5 <= ciphertext.count else { return nil }
        let length = Int(ciphertext[offset + 3]) << 8 | Int(ciphertext[offset + 4])
        types.append(ciphertext[offset])
        offset += 5 + length
    }
    return offset == ciphertext.count ? types : nil
}

extension Array where Element == UInt8 {
    /// `withUnsafeBytes` keeping the error's type (the standard one rethrows `any Error`).
    func withBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result = withUnsafeBytes { buffer -> Result<R, E> in
            do throws(E) { return .success(try body(buffer)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// `withUnsafeMutableBytes` keeping the error's type.
    mutating func withMutableBytes<R, E: Error>(_ body: (UnsafeMutableRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result = withUnsafeMutableBytes { buffer -> Result<R, E> in
            do throws(E) { return .success(try body(buffer)) } catch { return .failure(error) }
        }
        return try result.get()
    }
}
