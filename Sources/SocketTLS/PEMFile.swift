import COpenSSL
import Glibc

/// The contents of one PEM file (certificates, a certificate chain or a private key), read whole so
/// that every way it can be wrong gets its own message.
///
/// OpenSSL's `SSL_CTX_use_certificate_chain_file` and friends report a missing file, a DER file,
/// a swapped certificate and key and a passphrase-protected key all as some "PEM lib" or "no start
/// line" error. Reading the bytes here first lets each of those say what to do instead.
struct PEMFile {
    /// The file's bytes.
    let bytes: [UInt8]
    /// What the file is meant to hold, for messages: "certificate chain", "private key", "CA certificates".
    let purpose: String

    // A PEM certificate bundle is kilobytes; this bound only stops a mistaken path such as a log
    // file or /dev/zero from being read into memory.
    private static let maximumSize = 4 * 1024 * 1024

    /// Reads `path`; the errors name the file and say what is wrong with it.
    init(path: String, purpose: String, operation: String) throws(TLSError) {
        self.purpose = purpose
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw Self.unreadable(operation, path, errno, purpose: purpose)
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Self.unreadable(operation, path, errno, purpose: purpose)
            }
            if count == 0 { break }
            bytes += chunk[0..<count]
            guard bytes.count <= Self.maximumSize else {
                throw TLSError(.unreadableFile, operation: operation, target: path,
                               reason: "the file is larger than \(Self.maximumSize / 1024 / 1024) MiB, far more than any \(purpose); is this the right path?")
            }
        }
        self.bytes = bytes
    }

    /// Whether the text of the file contains `marker`.
    func contains(_ marker: String) -> Bool {
        let needle = Array(marker.utf8)
        guard needle.count <= bytes.count else { return false }
        for start in 0...(bytes.count - needle.count) where bytes[start] == needle[0] {
            if bytes[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }

    /// Why the file holds nothing OpenSSL could parse as `expected`, in words: empty, DER instead
    /// of PEM, or holding the other kind of object (a key where a certificate belongs, or the reverse).
    func explainMissing(_ expected: String) -> String {
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            return "the file is empty; it should hold the \(purpose) in PEM form"
        }
        if !contains("-----BEGIN ") {
            return "the file is not PEM (no \"-----BEGIN\" line; DER perhaps?); convert it with "
                + "`openssl x509 -inform DER -in FILE -out FILE.pem` (certificates) or `openssl pkey -inform DER` (keys)"
        }
        if expected == "certificate", contains("PRIVATE KEY-----") {
            return "the file holds a private key, not a certificate; are the certificate and key files swapped?"
        }
        if expected == "private key", contains("CERTIFICATE-----") {
            return "the file holds a certificate, not a private key; are the certificate and key files swapped?"
        }
        return "the file holds no readable PEM \(expected)"
    }

    /// Runs `body` with a read-only memory BIO over the bytes.
    func withBIO<R>(_ body: (OpaquePointer) throws(TLSError) -> R) throws(TLSError) -> R {
        // Array.withUnsafeBytes rethrows untyped errors; carry the typed one out in a Result.
        let result = bytes.withUnsafeBytes { buffer -> Result<R, TLSError> in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else {
                fatalError("BIO_new_mem_buf failed: out of memory")
            }
            defer { BIO_free(bio) }
            do throws(TLSError) {
                return .success(try body(bio))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    private static func unreadable(_ operation: String, _ path: String, _ code: Int32, purpose: String) -> TLSError {
        let hint: String
        switch code {
        case ENOENT: hint = "there is no such file; check the path (Scripts/dev-cert.sh makes a \(purpose) for testing)"
        case EACCES: hint = "this process may not read it; check the file's owner and permissions"
        case EISDIR: hint = "it is a directory, not a file"
        default: hint = "check the path"
        }
        return TLSError(.unreadableFile, operation: operation, target: path,
                        reason: "\(String(cString: strerror(code))) (errno \(code)): \(hint)")
    }
}

/// Answers OpenSSL's request for a key's passphrase with "none": a server started in the background
/// has no one to ask, and OpenSSL's default would prompt on (and hang waiting for) the terminal.
let refusePassphrase: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32 = { _, _, _, _ in
    -1
}
