// libFuzzer target: arbitrary bytes as a hostile TLS peer, or as the schedule of a conversation
// between two sessions with one corrupted byte (see TLSFuzzProperties.check). Built by
// Scripts/fuzz.sh; not part of the SwiftPM package.

/// libFuzzer's entry point: traps when an input breaks a session invariant.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTLS(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let violation = TLSFuzzProperties.check(input) { fatalError(violation) }
    return 0
}
