import COpenSSL

/// One entry of OpenSSL's per-thread error queue.
struct OpenSSLError {
    /// The packed code `ERR_get_error` returned.
    let code: UInt
    /// The library that raised it (`ERR_LIB_SSL`, `ERR_LIB_X509`, …).
    var library: Int32 { ERR_GET_LIB(code) }
    /// The library's reason code (`SSL_R_…`); for the SSL library, 1000 + n means "alert n received".
    var reason: Int32 { ERR_GET_REASON(code) }

    /// OpenSSL's wording, e.g. `error:0A000086:SSL routines::certificate verify failed`.
    var text: String {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 256) { buffer in
            ERR_error_string_n(code, buffer.baseAddress, buffer.count)
            return String(cString: buffer.baseAddress!)
        }
    }

    /// The alert a peer sent, when this entry reports one.
    var receivedAlert: TLSAlert? {
        guard library == ERR_LIB_SSL, reason > SSL_AD_REASON_OFFSET, reason < SSL_AD_REASON_OFFSET + 256 else { return nil }
        return TLSAlert(UInt8(reason - SSL_AD_REASON_OFFSET))
    }
}

/// OpenSSL's error queue for the calling thread.
///
/// The queue is per thread, so every call that may fail clears it first and reads it right after,
/// on the same thread, before anything else can add to it.
enum OpenSSLErrorQueue {
    /// Empties the queue, so that what it holds after the next call belongs to that call.
    static func clear() {
        ERR_clear_error()
    }

    /// Takes every entry off the queue, oldest (the root cause) first.
    static func drain() -> [OpenSSLError] {
        var entries: [OpenSSLError] = []
        while case let code = ERR_get_error(), code != 0 {
            entries.append(OpenSSLError(code: code))
        }
        return entries
    }

    /// Takes every entry off the queue and joins their wording with `; `.
    static func drainText() -> String {
        drain().map(\.text).joined(separator: "; ")
    }
}
