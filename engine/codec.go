package engine

import (
	"encoding/binary"
	"fmt"
	"math"
)

// healthCodecVersion is the first byte of an encoded Health; bump it when
// the layout changes so a shared store never misreads an old record.
const healthCodecVersion = 2

// healthSize is the encoded size of a Health record.
const healthSize = 1 + // version
	8 + 8 + 8 + 4 + 4 + 4 + 2 + 2 + 8 + 8 + // evidence
	8 + 4*windowBuckets + // window
	1 + 4 + 8 + 8 + 1 + 5 // state machine

// MarshalBinary encodes the record in a fixed-size layout, for stores that
// keep records outside the process (Redis).
func (h *Health) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, healthSize)
	b = append(b, healthCodecVersion)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(h.Success))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(h.Latency))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.LatencyAt))
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(h.TTFB.Mean))
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(h.TTFB.Var))
	b = binary.LittleEndian.AppendUint32(b, h.Samples)
	b = binary.LittleEndian.AppendUint16(b, h.ConsecFail)
	b = binary.LittleEndian.AppendUint16(b, h.ConsecOK)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.LastSuccess))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.LastFailure))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.window.head))
	for i := range windowBuckets {
		b = binary.LittleEndian.AppendUint16(b, h.window.ok[i])
		b = binary.LittleEndian.AppendUint16(b, h.window.fail[i])
	}
	b = append(b, byte(h.State))
	b = binary.LittleEndian.AppendUint32(b, h.Gen)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.Since))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.Until))
	slow := byte(0)
	if h.SlowStart {
		slow = 1
	}
	b = append(b, byte(h.Cause), h.Level, h.FailedRecoveries, h.Ejections, h.ProbeOK, slow)
	return b, nil
}

// UnmarshalBinary decodes a record written by MarshalBinary.
func (h *Health) UnmarshalBinary(b []byte) error {
	if len(b) != healthSize || b[0] != healthCodecVersion {
		return fmt.Errorf("engine: health record: want %d bytes of version %d, got %d bytes", healthSize, healthCodecVersion, len(b))
	}
	r := b[1:]
	u64 := func() uint64 { v := binary.LittleEndian.Uint64(r); r = r[8:]; return v }
	u32 := func() uint32 { v := binary.LittleEndian.Uint32(r); r = r[4:]; return v }
	u16 := func() uint16 { v := binary.LittleEndian.Uint16(r); r = r[2:]; return v }
	u8 := func() uint8 { v := r[0]; r = r[1:]; return v }
	var d Health
	d.Success = math.Float64frombits(u64())
	d.Latency = math.Float64frombits(u64())
	d.LatencyAt = int64(u64())
	d.TTFB.Mean = math.Float32frombits(u32())
	d.TTFB.Var = math.Float32frombits(u32())
	d.Samples = u32()
	d.ConsecFail = u16()
	d.ConsecOK = u16()
	d.LastSuccess = int64(u64())
	d.LastFailure = int64(u64())
	d.window.head = int64(u64())
	for i := range windowBuckets {
		d.window.ok[i] = u16()
		d.window.fail[i] = u16()
	}
	d.State = State(u8())
	d.Gen = u32()
	d.Since = int64(u64())
	d.Until = int64(u64())
	d.Cause = Class(u8())
	d.Level, d.FailedRecoveries, d.Ejections, d.ProbeOK = u8(), u8(), u8(), u8()
	d.SlowStart = u8() == 1
	if d.State >= numStates || d.Cause >= numClasses {
		return fmt.Errorf("engine: health record: invalid state %d or class %d", d.State, d.Cause)
	}
	if !(d.Success >= 0 && d.Success <= 1) || !(d.Latency >= 0 && d.Latency <= math.MaxFloat64) ||
		!(d.TTFB.Var >= 0 && d.TTFB.Var <= math.MaxFloat32) || math.IsNaN(float64(d.TTFB.Mean)) || math.IsInf(float64(d.TTFB.Mean), 0) {
		return fmt.Errorf("engine: health record: success %v, latency %v or time to answer %v out of range", d.Success, d.Latency, d.TTFB)
	}
	*h = d
	return nil
}
