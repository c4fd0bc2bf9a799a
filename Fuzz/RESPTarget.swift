// libFuzzer target: arbitrary bytes as a Redis server's reply stream into RESPParser (see
// RESPFuzzProperties.check). Built by Scripts/fuzz.sh; not part of the SwiftPM package.

/// libFuzzer's entry point: traps when an input breaks a parsing invariant.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRESP(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let violation = RESPFuzzProperties.check(input) { fatalError(violation) }
    return 0
}
