use super::*;

#[test]
fn startup_packets() {
    let mut b = vec![0, 0, 0, 0];
    b.extend_from_slice(&PROTOCOL_VERSION_3.to_be_bytes());
    b.extend_from_slice(b"user\0u\0database\0d\0\0");
    let len = b.len() as u32;
    b[..4].copy_from_slice(&len.to_be_bytes());
    let (p, used) = parse_startup(&b).unwrap().unwrap();
    assert_eq!(used, b.len());
    assert_eq!(
        p,
        StartupPacket::Startup {
            params: vec![("user".into(), "u".into()), ("database".into(), "d".into())]
        }
    );
    assert!(parse_startup(&b[..b.len() - 1]).unwrap().is_none(), "incomplete");
    let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    assert_eq!(parse_startup(&ssl).unwrap().unwrap().0, StartupPacket::SslRequest);
    let cancel = [0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 7, 0, 0, 0, 9];
    assert_eq!(
        parse_startup(&cancel).unwrap().unwrap().0,
        StartupPacket::CancelRequest { pid: 7, key: 9 }
    );
    assert!(parse_startup(&[0, 0, 0, 3])
        .unwrap_err()
        .to_string()
        .contains("invalid startup packet length 3"));
    assert!(parse_startup(&[0, 0x10, 0, 0]).unwrap_err().to_string().contains("length"));
    let v2 = [0, 0, 0, 8, 0, 2, 0, 0];
    assert!(parse_startup(&v2)
        .unwrap_err()
        .to_string()
        .contains("unsupported frontend protocol 2.0"));
}

#[test]
fn params_and_strings() {
    assert!(parse_params(b"user\0u\0\0x").is_err());
    assert!(parse_params(b"user\0u").is_err());
    assert!(single_cstr(b"select 1\0").is_ok());
    assert!(single_cstr(b"select 1\0\0").is_err());
    assert!(single_cstr(b"select 1").is_err());
    assert!(single_cstr(b"\xff\0").unwrap_err().to_string().contains("UTF-8"));
}

#[test]
fn frames_are_bounded_before_their_body_arrives() {
    assert_eq!(parse_frame(b"Q\0\0\0\x09abcd", 100).unwrap(), None, "one byte short");
    assert_eq!(
        parse_frame(b"Q\0\0\0\x09abcde", 100).unwrap(),
        Some(FrameHead { tag: b'Q', body_len: 5 })
    );
    // A declared length over the bound is refused from the 5-byte head alone.
    let err = parse_frame(b"d\x7f\xff\xff\xff", 100).unwrap_err();
    assert!(err.to_string().contains("exceeds the limit of 100 bytes"), "{err}");
    assert!(parse_frame(b"d\0\0\0\x03", 100)
        .unwrap_err()
        .to_string()
        .contains("invalid message length 3"));
}

#[test]
fn error_fields() {
    let f = ErrorFields::parse(b"SERROR\0VERROR\0C53300\0Mtoo many\0Dd\0Hh\0Xunknown\0\0").unwrap();
    assert_eq!(
        (f.severity.as_str(), f.code.as_str(), f.message.as_str()),
        ("ERROR", "53300", "too many")
    );
    assert_eq!((f.detail.as_deref(), f.hint.as_deref()), (Some("d"), Some("h")));
    assert_eq!(f.to_string(), "ERROR 53300: too many (detail: d) (hint: h)");
    assert!(ErrorFields::parse(b"SERROR\0").is_err(), "no terminator");
    assert!(ErrorFields::parse(b"SERROR").is_err(), "no NUL");
    assert!(ErrorFields::parse(b"\0x").is_err(), "trailing bytes");
}

#[test]
fn backend_encoders_round_trip_through_the_decoders() {
    use crate::backend as be;
    use crate::client::{parse_backend, BackendMessage};
    use bytes::BytesMut;
    let mut b = BytesMut::new();
    be::auth_ok(&mut b);
    assert_eq!(&b[..], b"R\0\0\0\x08\0\0\0\0");
    b.clear();
    be::ready_for_query(&mut b);
    assert_eq!(&b[..], b"Z\0\0\0\x05I");
    b.clear();
    be::copy_both_response(&mut b);
    assert_eq!(&b[..], b"W\0\0\0\x07\0\0\0");
    b.clear();
    be::parameter_status(&mut b, "a", "bc");
    assert_eq!(&b[..], b"S\0\0\0\x09a\0bc\0");
    b.clear();
    be::error_response(&mut b, "ERROR", b"XX000", "boom");
    assert_eq!(&b[..], b"E\0\0\0\x20SERROR\0VERROR\0CXX000\0Mboom\0\0");
    b.clear();
    let fields = ErrorFields {
        severity: "FATAL".into(),
        code: "53300".into(),
        message: "m".into(),
        detail: Some("d".into()),
        hint: None,
    };
    be::error_response_fields(&mut b, &fields);
    be::row_description(&mut b, &["a", "b"]);
    be::data_row(&mut b, &[Some("1"), None]);
    be::command_complete(&mut b, "SELECT 1");
    be::copy_out_response(&mut b);
    be::copy_data(&mut b, b"xyz");
    be::copy_done(&mut b);
    be::notice_response(&mut b, &fields);
    let want = [
        BackendMessage::ErrorResponse(fields.clone()),
        BackendMessage::RowDescription(vec!["a".into(), "b".into()]),
        BackendMessage::DataRow(vec![Some(bytes::Bytes::from_static(b"1")), None]),
        BackendMessage::CommandComplete("SELECT 1".into()),
        BackendMessage::CopyOutResponse,
        BackendMessage::CopyData(bytes::Bytes::from_static(b"xyz")),
        BackendMessage::CopyDone,
        BackendMessage::NoticeResponse(fields),
    ];
    for w in want {
        assert_eq!(parse_backend(&mut b).unwrap().unwrap(), w);
    }
    assert!(b.is_empty());
}
