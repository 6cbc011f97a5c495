package iwarp

import "errors"

// TerminateFor returns the Terminate error fields (Layer, EType, ECode) to
// send for an error returned by ParseULPDU, ParseFPDU, Deframer or
// ParseMPA, choosing the codes siw uses. ulpdu is the ULPDU that failed to
// parse (nil if there is none); its tagged flag picks the error type for a
// bad DDP version. The M, D and R flags are left false: set them when
// attaching the offending header.
//
// Mapping:
//
//	ErrDDPVersion          DDP   tagged/untagged buffer  TVersion/UTVersion
//	ErrRDMAPVersion        RDMAP remote operation        Version
//	ErrOpcode, ErrTagged   RDMAP remote operation        Opcode
//	ErrQN                  DDP   untagged buffer         UTInvalidQN
//	ErrReadRequestPayload  DDP   untagged buffer         UTMsgTooLong
//	ErrTruncated           DDP   catastrophic            Catastrophic
//	ErrCRC                 LLP   MPA                     ReceivedCRC
//	MPA frame errors       LLP   MPA                     InvalidReqResp
//	anything else          RDMAP catastrophic            Unspecified
func TerminateFor(err error, ulpdu []byte) Terminate {
	switch {
	case errors.Is(err, ErrDDPVersion):
		if len(ulpdu) > 0 && ulpdu[0]&DDPFlagTagged != 0 {
			return Terminate{Layer: LayerDDP, EType: DDPETypeTaggedBuf, ECode: DDPECodeTVersion}
		}
		return Terminate{Layer: LayerDDP, EType: DDPETypeUntaggedBuf, ECode: DDPECodeUTVersion}
	case errors.Is(err, ErrRDMAPVersion):
		return Terminate{Layer: LayerRDMAP, EType: RDMAPETypeRemoteOperation, ECode: RDMAPECodeVersion}
	case errors.Is(err, ErrOpcode), errors.Is(err, ErrTagged):
		return Terminate{Layer: LayerRDMAP, EType: RDMAPETypeRemoteOperation, ECode: RDMAPECodeOpcode}
	case errors.Is(err, ErrQN):
		return Terminate{Layer: LayerDDP, EType: DDPETypeUntaggedBuf, ECode: DDPECodeUTInvalidQN}
	case errors.Is(err, ErrReadRequestPayload):
		return Terminate{Layer: LayerDDP, EType: DDPETypeUntaggedBuf, ECode: DDPECodeUTMsgTooLong}
	case errors.Is(err, ErrTruncated):
		return Terminate{Layer: LayerDDP, EType: DDPETypeCatastrophic, ECode: DDPECodeCatastrophic}
	case errors.Is(err, ErrCRC):
		return Terminate{Layer: LayerLLP, EType: LLPETypeMPA, ECode: LLPECodeReceivedCRC}
	case errors.Is(err, ErrBadKey), errors.Is(err, ErrRevision),
		errors.Is(err, ErrPrivateDataTooLong), errors.Is(err, ErrIRDORDMissing),
		errors.Is(err, ErrMarkers):
		return Terminate{Layer: LayerLLP, EType: LLPETypeMPA, ECode: LLPECodeInvalidReqResp}
	}
	return Terminate{Layer: LayerRDMAP, EType: RDMAPETypeCatastrophic, ECode: RDMAPECodeUnspecified}
}
