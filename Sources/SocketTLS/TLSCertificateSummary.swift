import COpenSSL
import Glibc

/// What a person needs to know about a certificate to act on an error: whose it is, who signed
/// it, which names it covers and when it is valid.
public struct TLSCertificateSummary: Sendable, Hashable, CustomStringConvertible {
    /// The subject in RFC 2253 notation, e.g. `CN=localhost,O=SwiftSocketChat dev`.
    public let subject: String
    /// The issuer in RFC 2253 notation; equal to `subject` for a self-signed certificate.
    public let issuer: String
    /// The DNS names and IP addresses of its subjectAltName extension, in order.
    public let names: [String]
    /// The start of its validity, e.g. `2025-01-01 00:00:00 UTC`.
    public let validFrom: String
    /// The end of its validity, e.g. `2026-01-01 00:00:00 UTC`.
    public let validUntil: String
    /// Seconds from now until `validUntil`; negative once expired.
    public let secondsUntilExpiry: Int64

    /// `CN=localhost (localhost, 127.0.0.1, ::1), valid until 2026-01-01 00:00:00 UTC`.
    public var description: String {
        let covered = names.isEmpty ? "" : " (\(names.joined(separator: ", ")))"
        return "\(subject)\(covered), valid until \(validUntil)"
    }

    /// Reads the summary out of an `X509` (borrowed; not freed here).
    init(_ certificate: OpaquePointer) {
        subject = Self.text(of: X509_get_subject_name(certificate))
        issuer = Self.text(of: X509_get_issuer_name(certificate))
        names = Self.alternativeNames(of: certificate)
        validFrom = Self.text(of: X509_get0_notBefore(certificate))
        validUntil = Self.text(of: X509_get0_notAfter(certificate))
        var days: Int32 = 0
        var seconds: Int32 = 0
        if ASN1_TIME_diff(&days, &seconds, nil, X509_get0_notAfter(certificate)) == 1 {
            secondsUntilExpiry = Int64(days) * 86_400 + Int64(seconds)
        } else {
            secondsUntilExpiry = 0
        }
    }

    private static func text(of name: OpaquePointer?) -> String {
        guard let name, let bio = BIO_new(BIO_s_mem()) else { return "?" }
        defer { BIO_free(bio) }
        guard sockettls_X509_NAME_print_rfc2253(bio, name) >= 0 else { return "?" }
        return contents(of: bio)
    }

    private static func text(of time: UnsafePointer<ASN1_TIME>?) -> String {
        var parts = tm()
        guard let time, ASN1_TIME_to_tm(time, &parts) == 1 else { return "an unreadable date" }
        func pad(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2)) "
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)) UTC"
    }

    private static func alternativeNames(of certificate: OpaquePointer) -> [String] {
        guard let raw = X509_get_ext_d2i(certificate, NID_subject_alt_name, nil, nil) else { return [] }
        let names = OpaquePointer(raw)
        defer { sockettls_GENERAL_NAMES_free(names) }
        var result: [String] = []
        for index in 0..<sockettls_GENERAL_NAMES_count(names) {
            guard let entry = sockettls_GENERAL_NAMES_value(names, index)?.pointee else { continue }
            switch entry.type {
            case GEN_DNS:
                if let string = entry.d.dNSName { result.append(Self.text(of: string)) }
            case GEN_IPADD:
                if let string = entry.d.iPAddress { result.append(Self.address(from: string)) }
            default:
                continue
            }
        }
        return result
    }

    private static func text(of string: UnsafeMutablePointer<ASN1_STRING>) -> String {
        let bytes = UnsafeBufferPointer(start: ASN1_STRING_get0_data(string), count: Int(ASN1_STRING_length(string)))
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func address(from string: UnsafeMutablePointer<ASN1_STRING>) -> String {
        let length = Int(ASN1_STRING_length(string))
        guard let data = ASN1_STRING_get0_data(string), length == 4 || length == 16 else { return "an unreadable address" }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = length == 4 ? AF_INET : AF_INET6
        guard inet_ntop(family, data, &text, socklen_t(text.count)) != nil else { return "an unreadable address" }
        return text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}

/// The bytes a memory BIO holds, as text.
func contents(of bio: OpaquePointer) -> String {
    var data: UnsafeMutablePointer<CChar>?
    let length = sockettls_BIO_get_mem_data(bio, &data)
    guard let data, length > 0 else { return "" }
    return data.withMemoryRebound(to: UInt8.self, capacity: length) {
        String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
    }
}
