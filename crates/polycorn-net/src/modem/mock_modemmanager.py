'''A small ModemManager for python-dbusmock: the root object (an ObjectManager) and, through
the methods below on the mock interface, modems with the Modem, Modem3gpp, Signal and Location
interfaces and one bearer each. `polycorn_net::modem::mock` starts it and drives it.

AddModem(index, imei, iface) -> object path; SetCell(modem, "MCC,MNC,LAC,CI,TAC");
SetSignal(modem, rsrp, rsrq, snr); SetGnss(modem, lat, lon); SetBearer(modem, connected); SetRegistration(modem, state);
RemoveModem(modem).
'''

import dbus

from dbusmock import MOCK_IFACE, mockobject

BUS_NAME = 'org.freedesktop.ModemManager1'
MAIN_OBJ = '/org/freedesktop/ModemManager1'
MAIN_IFACE = 'org.freedesktop.ModemManager1'
SYSTEM_BUS = True
IS_OBJECT_MANAGER = True

MODEM = 'org.freedesktop.ModemManager1.Modem'
GPP = 'org.freedesktop.ModemManager1.Modem.Modem3gpp'
SIGNAL = 'org.freedesktop.ModemManager1.Modem.Signal'
LOCATION = 'org.freedesktop.ModemManager1.Modem.Location'
BEARER = 'org.freedesktop.ModemManager1.Bearer'

LTE = 1 << 14


def load(mock, parameters):
    mock.AddMethod(MAIN_IFACE, 'ScanDevices', '', '', '')
    mock.bearer_count = 0


def _obj(path):
    return mockobject.objects[path]


def _emit_props(obj, iface, changed):
    obj.EmitSignal('org.freedesktop.DBus.Properties', 'PropertiesChanged', 'sa{sv}as',
                   [iface, changed, dbus.Array([], signature='s')])


@dbus.service.method(MOCK_IFACE, in_signature='uss', out_signature='o')
def AddModem(self, index, imei, iface):
    path = f'/org/freedesktop/ModemManager1/Modem/{index}'
    bearer = f'/org/freedesktop/ModemManager1/Bearer/{self.bearer_count}'
    self.bearer_count += 1
    self.AddObject(bearer, BEARER, {
        'Connected': dbus.Boolean(True),
        'Interface': dbus.String(iface),
        'Suspended': dbus.Boolean(False),
    }, [])
    self.AddObject(path, MODEM, {
        'EquipmentIdentifier': dbus.String(imei),
        'DeviceIdentifier': dbus.String('dev-' + imei),
        'Manufacturer': dbus.String('Mock'),
        'Model': dbus.String('LTE mock'),
        'State': dbus.Int32(11),
        'AccessTechnologies': dbus.UInt32(LTE),
        'Ports': dbus.Array([dbus.Struct((dbus.String('cdc-wdm' + str(index)), dbus.UInt32(6))),
                             dbus.Struct((dbus.String(iface), dbus.UInt32(2)))],
                            signature='(su)'),
        'Bearers': dbus.Array([dbus.ObjectPath(bearer)], signature='o'),
    }, [])
    modem = _obj(path)
    modem.AddProperties(GPP, {
        'Imei': dbus.String(imei),
        'RegistrationState': dbus.UInt32(1),
        'OperatorCode': dbus.String('26201'),
    })
    modem.AddProperties(SIGNAL, {
        'Rate': dbus.UInt32(0),
        'Lte': dbus.Dictionary({'rsrp': dbus.Double(-90.0), 'rsrq': dbus.Double(-10.0),
                                'snr': dbus.Double(10.0), 'rssi': dbus.Double(-65.0)},
                               signature='sv'),
        'Nr5g': dbus.Dictionary({}, signature='sv'),
        'Umts': dbus.Dictionary({}, signature='sv'),
        'Gsm': dbus.Dictionary({}, signature='sv'),
    })
    modem.AddMethod(SIGNAL, 'Setup', 'u', '',
                    'self.props["%s"]["Rate"] = dbus.UInt32(args[0])' % SIGNAL)
    modem.AddProperties(LOCATION, {
        'Capabilities': dbus.UInt32(7),
        'Enabled': dbus.UInt32(1),
        'SignalsLocation': dbus.Boolean(False),
        'Location': dbus.Dictionary({dbus.UInt32(1): dbus.String('262,01,0,0,0')}, signature='uv'),
    })
    modem.AddMethod(LOCATION, 'Setup', 'ub', '',
                    'self.props["%s"]["Enabled"] = dbus.UInt32(args[0])' % LOCATION)
    modem.AddMethod(LOCATION, 'GetLocation', '', 'a{uv}',
                    'ret = self.props["%s"]["Location"]' % LOCATION)
    modem.AddMethod(MODEM, 'GetCellInfo', '', 'aa{sv}',
                    'ret = dbus.Array([dbus.Dictionary({"serving": dbus.Boolean(True), '
                    '"physical-ci": dbus.String("2A")}, signature="sv")], signature="a{sv}")')
    self.object_manager_emit_added(path)
    return path


@dbus.service.method(MOCK_IFACE, in_signature='os', out_signature='')
def SetCell(self, modem, location):
    obj = _obj(modem)
    # The 3GPP source changes; a GNSS position stays.
    loc = dict(obj.props[LOCATION]['Location'])
    loc[dbus.UInt32(1)] = dbus.String(location)
    obj.props[LOCATION]['Location'] = dbus.Dictionary(loc, signature='uv')
    # ModemManager signals location through the Location property when asked to; a changed
    # signal here stands for the modem's other property changes a handover brings.
    _emit_props(obj, LOCATION, {'Location': obj.props[LOCATION]['Location']})


@dbus.service.method(MOCK_IFACE, in_signature='odd', out_signature='')
def SetGnss(self, modem, lat, lon):
    obj = _obj(modem)
    loc = dict(obj.props[LOCATION]['Location'])
    loc[dbus.UInt32(2)] = dbus.Dictionary({'latitude': dbus.Double(lat),
                                           'longitude': dbus.Double(lon),
                                           'utc-time': dbus.String('120000.00')},
                                          signature='sv')
    obj.props[LOCATION]['Location'] = dbus.Dictionary(loc, signature='uv')
    _emit_props(obj, LOCATION, {'Location': obj.props[LOCATION]['Location']})


@dbus.service.method(MOCK_IFACE, in_signature='oddd', out_signature='')
def SetSignal(self, modem, rsrp, rsrq, snr):
    obj = _obj(modem)
    lte = dbus.Dictionary({'rsrp': dbus.Double(rsrp), 'rsrq': dbus.Double(rsrq),
                           'snr': dbus.Double(snr)}, signature='sv')
    obj.props[SIGNAL]['Lte'] = lte
    _emit_props(obj, SIGNAL, {'Lte': lte})


@dbus.service.method(MOCK_IFACE, in_signature='ob', out_signature='')
def SetBearer(self, modem, connected):
    for bearer in _obj(modem).props[MODEM]['Bearers']:
        _obj(bearer).UpdateProperties(BEARER, {'Connected': dbus.Boolean(connected)})
    _obj(modem).UpdateProperties(MODEM, {'State': dbus.Int32(11 if connected else 8)})


@dbus.service.method(MOCK_IFACE, in_signature='ou', out_signature='')
def SetRegistration(self, modem, state):
    _obj(modem).UpdateProperties(GPP, {'RegistrationState': dbus.UInt32(state)})


@dbus.service.method(MOCK_IFACE, in_signature='o', out_signature='')
def RemoveModem(self, modem):
    obj = _obj(modem)
    bearers = list(obj.props[MODEM]['Bearers'])
    self.object_manager_emit_removed(modem)
    self.RemoveObject(modem)
    for b in bearers:
        self.RemoveObject(b)
