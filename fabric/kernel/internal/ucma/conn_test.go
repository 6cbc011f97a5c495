package ucma

import (
	"errors"
	"syscall"
	"testing"
)

func TestConnParamRoundTrip(t *testing.T) {
	// Hand image of struct rdma_ucm_conn_param.
	img := make([]byte, 272)
	h32(img, 0, 77)               // 0 qp_num
	h32(img, 4, 0x80010000)       // 4 qkey
	copy(img[8:], pattern(92, 3)) // 8 private_data
	img[264] = 92                 // 264 private_data_len
	img[265] = 1                  // 265 srq
	img[266] = 0xff               // 266 responder_resources (RDMA_MAX_RESP_RES)
	img[267] = 0xff               // 267 initiator_depth
	img[268] = 0                  // 268 flow_control
	img[269] = 5                  // 269 retry_count
	img[270] = 5                  // 270 rnr_retry_count
	img[271] = 1                  // 271 valid

	want := ConnParam{QPNum: 77, QKey: 0x80010000, PrivateDataLen: 92, SRQ: 1,
		ResponderResources: 0xff, InitiatorDepth: 0xff, RetryCount: 5, RNRRetryCount: 5, Valid: 1}
	copy(want.PrivateData[:], pattern(92, 3))

	var got ConnParam
	if err := got.Decode(img); err != nil || got != want {
		t.Errorf("Decode = %+v, %v", got, err)
	}
	out := fill(272)
	if err := want.Encode(out); err != nil {
		t.Fatal(err)
	}
	diff(t, "conn_param", out, img)
	if err := got.Decode(img[:271]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short: %v", err)
	}
	if err := want.Encode(out[:271]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short encode: %v", err)
	}
}

func TestConnParamSetPrivateData(t *testing.T) {
	var c ConnParam
	if err := c.SetPrivateData(pattern(255, 0)); err != nil || c.PrivateDataLen != 255 {
		t.Errorf("255 bytes: len %d err %v", c.PrivateDataLen, err)
	}
	if err := c.SetPrivateData([]byte{1, 2}); err != nil || c.PrivateDataLen != 2 || c.PrivateData[2] != 0 || string(c.Data()) != "\x01\x02" {
		t.Errorf("shrink: len %d tail %d", c.PrivateDataLen, c.PrivateData[2])
	}
	err := c.SetPrivateData(make([]byte, 256))
	if !errors.Is(err, ErrPrivateData) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("256 bytes: %v", err)
	}
}

func TestAHAttrAndUDParam(t *testing.T) {
	// ud_param image: 0 qp_num, 4 qkey, 8 ah_attr, 40 private_data, 296 len.
	img := make([]byte, 304)
	h32(img, 0, 0x00ffffff)
	h32(img, 4, 0x01234567)
	a := img[8:40]
	copy(a[0:16], testGID[:]) // 0 dgid
	h32(a, 16, 0x000abcde)    // 16 flow_label
	a[20] = 2                 // 20 sgid_index
	a[21] = 64                // 21 hop_limit
	a[22] = 0x20              // 22 traffic_class
	h16(a, 24, 0x0017)        // 24 dlid
	a[26] = 3                 // 26 sl
	a[27] = 1                 // 27 src_path_bits
	a[28] = 3                 // 28 static_rate
	a[29] = 1                 // 29 is_global
	a[30] = 1                 // 30 port_num
	copy(img[40:], pattern(180, 50))
	img[296] = 180

	want := eventUDWant()
	var got UDParam
	if err := got.Decode(img); err != nil || got != want {
		t.Errorf("UDParam.Decode:\n got %+v\nwant %+v (err %v)", got, want, err)
	}
	out := fill(304)
	if err := want.Encode(out); err != nil {
		t.Fatal(err)
	}
	diff(t, "ud_param", out, img)

	var ah AHAttr
	if err := ah.Decode(img[8:40]); err != nil || ah != want.AHAttr {
		t.Errorf("AHAttr.Decode = %+v, %v", ah, err)
	}
	aout := fill(32)
	if err := want.AHAttr.Encode(aout); err != nil {
		t.Fatal(err)
	}
	diff(t, "ah_attr", aout, img[8:40])
	if err := ah.Decode(img[:31]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short ah: %v", err)
	}
	if err := got.Decode(img[:303]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short ud: %v", err)
	}
}
