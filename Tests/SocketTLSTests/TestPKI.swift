// Also compiled into the TLS fuzz target by Scripts/fuzz.sh (-D FUZZING, one module with
// the SocketTLS sources): no Testing, no imports of our modules outside `#if !FUZZING`.
import COpenSSL
import Glibc

/// Certificates and keys for tests, made with OpenSSL's API into a temporary directory: CAs,
/// server certificates for any names and any validity window (an expired one is just a window in
/// the past), self-signed ones, and broken files. No `openssl` binary and no fixed dates, so the
/// tests run the same on a fresh machine next year.
///
/// Removes its directory when released.
final class TestPKI {
    /// The temporary directory holding every file written.
    let directory: String

    /// A certificate with its key, in memory and as PEM files.
    final class Identity {
        /// The certificate as an `X509`, owned by this object.
        let certificate: OpaquePointer
        /// The key as an `EVP_PKEY`, owned by this object.
        let key: OpaquePointer
        /// The PEM file with the certificate (and, for an issued one, nothing else).
        let certificateFile: String
        /// The PEM file with the unencrypted private key, mode 0600.
        let keyFile: String

        init(certificate: OpaquePointer, key: OpaquePointer, certificateFile: String, keyFile: String) {
            self.certificate = certificate
            self.key = key
            self.certificateFile = certificateFile
            self.keyFile = keyFile
        }

        deinit {
            X509_free(certificate)
            EVP_PKEY_free(key)
        }
    }

    private var serial: Int = 1

    init() {
        var template = Array("/tmp/sockettls-pki-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { fatalError("mkdtemp failed: errno \(errno)") }
        directory = String(cString: made)
    }

    deinit {
        Self.removeTree(directory)
    }

    /// Deletes `path` and everything below it (tests make subdirectories, e.g. for dev-cert.sh).
    private static func removeTree(_ path: String) {
        if let entries = opendir(path) {
            while let entry = readdir(entries) {
                // Read in place: a copy of `d_name` reads 256 bytes, past a short last entry
                // (ChatStorage's DirectoryEntries says more).
                let name = withUnsafePointer(to: &entry.pointee.d_name) { field in
                    field.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
                }
                guard name != "." && name != ".." else { continue }
                if Int32(entry.pointee.d_type) == DT_DIR {
                    removeTree("\(path)/\(name)")
                } else {
                    unlink("\(path)/\(name)")
                }
            }
            closedir(entries)
        }
        rmdir(path)
    }

    /// A path inside the directory.
    func path(_ name: String) -> String { "\(directory)/\(name)" }

    /// Writes `text` to `name` in the directory and returns its path.
    @discardableResult
    func write(_ name: String, _ text: String, mode: mode_t = 0o600) -> String {
        let file = path(name)
        let descriptor = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        precondition(descriptor >= 0, "cannot create \(file): errno \(errno)")
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        precondition(written == bytes.count, "short write to \(file)")
        close(descriptor)
        return file
    }

    /// The contents of the file at `path`.
    func read(_ file: String) -> String {
        guard let stream = fopen(file, "r") else { fatalError("cannot open \(file)") }
        defer { fclose(stream) }
        var bytes: [UInt8] = []
        while case let byte = getc(stream), byte != EOF { bytes.append(UInt8(byte)) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A CA certificate named `name`, self-signed (a root) or issued by `issuer` (an intermediate),
    /// valid from an hour ago for ten years.
    func certificateAuthority(_ name: String, issuedBy issuer: Identity? = nil) -> Identity {
        let key = Self.makeKey()
        let certificate = makeCertificate(
            commonName: name, publicKey: key, issuer: issuer?.certificate, signingKey: issuer?.key ?? key, names: [],
            validFrom: -3600, validFor: 10 * 365 * 86_400, isCA: true)
        return store(name, certificate: certificate, key: key)
    }

    /// A server certificate for `names` (host names and IP addresses), signed by `issuer` (or by
    /// itself when `nil`), valid from `validFrom` seconds from now for `validFor` seconds.
    func serverCertificate(
        _ fileName: String, commonName: String = "localhost", names: [String] = ["localhost", "127.0.0.1", "::1"],
        issuedBy issuer: Identity?, validFrom: Int = -3600, validFor: Int = 365 * 86_400
    ) -> Identity {
        let key = Self.makeKey()
        let certificate = makeCertificate(
            commonName: commonName, publicKey: key, issuer: issuer?.certificate, signingKey: issuer?.key ?? key,
            names: names, validFrom: validFrom, validFor: validFor, isCA: false)
        return store(fileName, certificate: certificate, key: key)
    }

    /// Writes `identity`'s key to `name` encrypted with `passphrase` (AES-256-CBC) and returns the path.
    func encryptedKeyFile(_ name: String, for identity: Identity, passphrase: String) -> String {
        let file = path(name)
        guard let bio = BIO_new_file(file, "w") else { fatalError("cannot create \(file)") }
        defer { BIO_free(bio) }
        var secret = Array(passphrase.utf8)
        let written = secret.withUnsafeMutableBufferPointer { buffer in
            PEM_write_bio_PrivateKey(bio, identity.key, EVP_aes_256_cbc(), buffer.baseAddress, Int32(buffer.count), nil, nil)
        }
        precondition(written == 1, "PEM_write_bio_PrivateKey failed")
        return file
    }

    /// Concatenates the PEM files `parts` into `name` (a chain file, a CA bundle) and returns its path.
    func concatenate(_ name: String, _ parts: [String]) -> String {
        write(name, parts.map(read).joined())
    }

    // MARK: Making keys and certificates

    private func store(_ name: String, certificate: OpaquePointer, key: OpaquePointer) -> Identity {
        let certificateFile = path("\(name).pem")
        let keyFile = path("\(name)-key.pem")
        Self.writePEM(certificateFile) { PEM_write_bio_X509($0, certificate) }
        Self.writePEM(keyFile) { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }
        chmod(keyFile, 0o600)
        return Identity(certificate: certificate, key: key, certificateFile: certificateFile, keyFile: keyFile)
    }

    private static func writePEM(_ file: String, _ write: (OpaquePointer) -> Int32) {
        guard let bio = BIO_new_file(file, "w") else { fatalError("cannot create \(file)") }
        defer { BIO_free(bio) }
        precondition(write(bio) == 1, "writing \(file) failed")
    }

    /// A new EC P-256 key.
    static func makeKey() -> OpaquePointer {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { fatalError("EVP_PKEY_CTX_new_from_name failed") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1,
              EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
              EVP_PKEY_generate(context, &key) == 1, let key
        else { fatalError("EC key generation failed") }
        return key
    }

    private func makeCertificate(
        commonName: String, publicKey: OpaquePointer, issuer: OpaquePointer?, signingKey: OpaquePointer,
        names: [String], validFrom: Int, validFor: Int, isCA: Bool
    ) -> OpaquePointer {
        guard let certificate = X509_new() else { fatalError("X509_new failed") }
        serial += 1
        X509_set_version(certificate, 2)
        ASN1_INTEGER_set(X509_get_serialNumber(certificate), serial)
        X509_gmtime_adj(X509_getm_notBefore(certificate), validFrom)
        X509_gmtime_adj(X509_getm_notAfter(certificate), validFrom + validFor)
        X509_set_pubkey(certificate, publicKey)
        let subject = X509_get_subject_name(certificate)
        X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, commonName, -1, -1, 0)
        X509_set_issuer_name(certificate, issuer.map { X509_get_subject_name($0) } ?? subject)

        var extensionContext = X509V3_CTX()
        sockettls_X509V3_set_ctx_nodb(&extensionContext)
        X509V3_set_ctx(&extensionContext, issuer ?? certificate, certificate, nil, nil, 0)
        var extensions: [(Int32, String)] = [
            (NID_basic_constraints, isCA ? "critical,CA:TRUE" : "critical,CA:FALSE"),
            (NID_key_usage, isCA ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature"),
            (NID_subject_key_identifier, "hash"),
        ]
        if !isCA { extensions.append((NID_ext_key_usage, "serverAuth")) }
        if issuer != nil { extensions.append((NID_authority_key_identifier, "keyid:always")) }
        if !names.isEmpty {
            let entries = names.map { name in
                name.contains(":") || name.allSatisfy({ $0.isNumber || $0 == "." }) ? "IP:\(name)" : "DNS:\(name)"
            }
            extensions.append((NID_subject_alt_name, entries.joined(separator: ",")))
        }
        for (nid, value) in extensions {
            guard let made = X509V3_EXT_conf_nid(nil, &extensionContext, nid, value) else {
                fatalError("extension \(nid)=\(value) refused")
            }
            X509_add_ext(certificate, made, -1)
            X509_EXTENSION_free(made)
        }
        guard X509_sign(certificate, signingKey, EVP_sha256()) > 0 else { fatalError("X509_sign failed") }
        return certificate
    }
}
