// libFuzzer target: arbitrary bytes as a stream into FrameDecoder (see
// FuzzProperties.checkDecoding). Built by Scripts/fuzz.sh; not part of the SwiftPM package.

/// libFuzzer's entry point: traps when an input breaks a decoding invariant.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDecode(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let violation = FuzzProperties.checkDecoding(input) { fatalError(violation) }
    return 0
}
