import Foundation
import SocketTLS

/// A temporary directory holding Scripts/dev-cert.sh's CA and a server certificate for localhost,
/// 127.0.0.1 and ::1; removed when released.
///
/// `@unchecked Sendable`: `directory` never changes; `issue` rewrites the files in it, which the
/// tests that call it do from one task.
public final class DevCertificates: @unchecked Sendable {
    /// Scripts/dev-cert.sh, found from this file's place in the repository.
    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Scripts/dev-cert.sh")

    /// The directory the files are in.
    public let directory: String

    private init(directory: String) { self.directory = directory }

    /// Runs dev-cert.sh into a fresh temporary directory.
    public static func make() async throws -> DevCertificates {
        let certificates = DevCertificates(directory: try TemporaryDirectory(prefix: "chat-tls").path)
        try await certificates.issue()
        return certificates
    }

    /// Issues a new server certificate from the same CA, also naming `names`.
    public func issue(names: [String] = []) async throws {
        let script = try ChildProcess(Self.script, ["--out", directory] + names.flatMap { ["--name", $0] })
        let status = await script.waitForExit()
        guard status == 0 else { throw DevCertificatesFailed(status: status, output: script.output) }
    }

    /// `--tls-cert` and `--tls-key` for `chat-server`.
    public var serverArguments: [String] { ["--tls-cert", "\(directory)/server.pem", "--tls-key", "\(directory)/server-key.pem"] }

    /// The CA's certificate, the one a client must trust.
    public var caFile: String { "\(directory)/ca.pem" }

    /// A client context trusting the dev CA.
    public func clientContext() throws -> TLSContext { try TLSContext(.client(trust: .certificateAuthorities(file: caFile))) }

    deinit { try? FileManager.default.removeItem(atPath: directory) }
}

/// Scripts/dev-cert.sh did not make the certificates.
public struct DevCertificatesFailed: Error, CustomStringConvertible {
    /// Its exit status; nil if it did not exit in time.
    public var status: Int32?
    /// What it printed.
    public var output: String

    /// For the test's failure message.
    public var description: String { "dev-cert.sh exited \(String(describing: status)): \(output)" }
}
