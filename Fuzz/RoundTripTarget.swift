// libFuzzer target: arbitrary bytes drive FrameGenerator to a valid frame, which must
// survive encode → decode (see FuzzProperties.checkRoundTrip). Built by Scripts/fuzz.sh;
// not part of the SwiftPM package.

/// libFuzzer's entry point: traps when a generated frame does not round-trip.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRoundTrip(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let violation = FuzzProperties.checkRoundTrip(input) { fatalError(violation) }
    return 0
}
